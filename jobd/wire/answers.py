"""What the broker answers, as small typed envelopes around plain resource documents.

Resource documents travel as dicts, exactly as the broker sends them, so `job get -o
json` prints them untouched and the worker validates only what it uses; the envelopes
around them (apply results, pages of events, watch batches, log chunks, a report batch's
results) are typed here, for the CLI and the worker alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "ApplyResult",
    "BlockersResult",
    "Document",
    "DrainResult",
    "EventPage",
    "HeartbeatAnswer",
    "JobList",
    "LogChunk",
    "Registered",
    "ReportResult",
    "WatchChange",
    "WatchPage",
]

Document = dict[str, Any]


@dataclass(frozen=True)
class ApplyResult:
    kind: str
    name: str  # "<project>/<name>" for a Job, "<name>" otherwise
    action: Literal["created", "configured", "unchanged"]
    object: Document | None  # None when asked for without objects


@dataclass(frozen=True)
class JobList:
    items: list[Document]
    revision: int


@dataclass(frozen=True)
class WatchChange:
    revision: int
    kind: str
    op: Literal["ADDED", "MODIFIED", "DELETED"]
    object: Document


@dataclass(frozen=True)
class WatchPage:
    revision: int
    changes: list[WatchChange]


@dataclass(frozen=True)
class EventPage:
    items: list[Document]
    last: int | None


@dataclass(frozen=True)
class LogChunk:
    data: bytes
    offset: int  # where the next read starts
    done: bool  # the job is terminal and every byte has been read


@dataclass(frozen=True)
class BlockersResult:
    candidate: int
    worker: str | None
    victims: list[Document]
    dry_run: bool


@dataclass(frozen=True)
class DrainResult:
    worker: Document
    preempted: list[int]  # preempted by this request
    remaining: list[Document]  # the jobs still bound to the worker


@dataclass(frozen=True)
class Registered:
    worker: Document
    revision: int  # the store's revision when the worker was written


@dataclass(frozen=True)
class HeartbeatAnswer:
    worker: Document
    stop: list[int]  # jobs the worker runs that the broker does not bind to it


@dataclass(frozen=True)
class ReportResult:
    """How the broker answered one report of a batch: 200, or the status its route gives."""

    job: int
    status: int
    phase: str | None = None  # the job's phase after a report that applied
    detail: str | None = None  # why a refused report was refused
