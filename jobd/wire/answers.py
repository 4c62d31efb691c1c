"""What the broker answers, as small typed envelopes around plain resource documents.

Resource documents travel as dicts, exactly as the broker sends them, so `job get -o
json` prints them untouched and the worker validates only what it uses; the envelopes
around them (apply results, pages of events, watch batches, log chunks, a report batch's
results) are typed here, for the CLI and the worker alike. They are `Frozen` records, not
frozen dataclasses, which cost every client ~40 M instructions at import (api/frozen.py).
"""

from __future__ import annotations

from typing import Any, Literal

from jobd.api.frozen import Frozen

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
Action = Literal["created", "configured", "unchanged"]
Op = Literal["ADDED", "MODIFIED", "DELETED"]


class ApplyResult(Frozen):
    kind: str
    name: str  # "<project>/<name>" for a Job, "<name>" otherwise
    action: Action
    object: Document | None  # None when asked for without objects

    def __init__(self, kind: str, name: str, action: Action, object: Document | None) -> None:
        self._set(kind=kind, name=name, action=action, object=object)


class JobList(Frozen):
    items: list[Document]
    revision: int

    def __init__(self, items: list[Document], revision: int) -> None:
        self._set(items=items, revision=revision)


class WatchChange(Frozen):
    revision: int
    kind: str
    op: Op
    object: Document

    def __init__(self, revision: int, kind: str, op: Op, object: Document) -> None:
        self._set(revision=revision, kind=kind, op=op, object=object)


class WatchPage(Frozen):
    revision: int
    changes: list[WatchChange]

    def __init__(self, revision: int, changes: list[WatchChange]) -> None:
        self._set(revision=revision, changes=changes)


class EventPage(Frozen):
    items: list[Document]
    last: int | None

    def __init__(self, items: list[Document], last: int | None) -> None:
        self._set(items=items, last=last)


class LogChunk(Frozen):
    data: bytes
    offset: int  # where the next read starts
    done: bool  # the job is terminal and every byte has been read

    def __init__(self, data: bytes, offset: int, done: bool) -> None:
        self._set(data=data, offset=offset, done=done)


class BlockersResult(Frozen):
    candidate: int
    worker: str | None
    victims: list[Document]
    dry_run: bool
    # A gang's: every worker room is freed on for it, rank 0's (`worker`) first; else [].
    workers: list[str]

    def __init__(
        self,
        candidate: int,
        worker: str | None,
        victims: list[Document],
        dry_run: bool,
        workers: list[str] | None = None,
    ) -> None:
        self._set(
            candidate=candidate,
            worker=worker,
            victims=victims,
            dry_run=dry_run,
            workers=workers or [],
        )


class DrainResult(Frozen):
    worker: Document
    preempted: list[int]  # preempted by this request
    remaining: list[Document]  # the jobs still bound to the worker

    def __init__(self, worker: Document, preempted: list[int], remaining: list[Document]) -> None:
        self._set(worker=worker, preempted=preempted, remaining=remaining)


class Registered(Frozen):
    worker: Document
    revision: int  # the store's revision when the worker was written

    def __init__(self, worker: Document, revision: int) -> None:
        self._set(worker=worker, revision=revision)


class HeartbeatAnswer(Frozen):
    worker: Document
    stop: list[int]  # jobs the worker runs that the broker does not bind to it

    def __init__(self, worker: Document, stop: list[int]) -> None:
        self._set(worker=worker, stop=stop)


class ReportResult(Frozen):
    """How the broker answered one report of a batch: 200, or the status its route gives."""

    job: int
    status: int
    phase: str | None  # the job's phase after a report that applied
    detail: str | None  # why a refused report was refused

    def __init__(
        self, job: int, status: int, phase: str | None = None, detail: str | None = None
    ) -> None:
        self._set(job=job, status=status, phase=phase, detail=detail)
