"""events.jsonl and the structured logs of the broker and the worker.

events.jsonl is the durable, greppable record of what happened (CONTRACT.md §7). The
store commits an event together with the change that justifies it; EventLog appends the
line only after that commit. The programs' own logs are structlog JSON lines on stderr,
one event each, with `ts`, `level`, `event` and `component` (schema in docs/events.md).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

import structlog

from jobd.store.base import Change, EventRecord

__all__ = ["EventLog", "configure_logging", "get_logger", "redact_url"]


class EventLog:
    """Appends committed events to `<log dir>/events.jsonl`, one JSON object a line."""

    def __init__(self, log_dir: Path) -> None:
        log_dir.mkdir(parents=True, exist_ok=True)
        self.path = log_dir / "events.jsonl"
        self._file: TextIO = self.path.open("a", buffering=1, encoding="utf-8")

    def on_commit(self, _changes: Sequence[Change], events: Sequence[EventRecord]) -> None:
        if events:
            lines = "".join(ev.line() + "\n" for ev in events)
            # The store already holds these durably; the file is a derived, greppable copy.
            self._file.write(lines)
            self._file.flush()

    def close(self) -> None:
        self._file.close()


def configure_logging(component: str, level: str = "info", stream: TextIO | None = None) -> None:
    """JSON lines on stderr: ts (RFC 3339 UTC), level, event, component, then the rest.

    Records of the standard library's logging (uvicorn's among them) are rendered the
    same way, so every line on stderr parses as one JSON object.
    """
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True, key="ts"),
    ]
    structlog.configure(
        processors=[
            *shared,
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(sort_keys=False),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level.upper())),
        logger_factory=structlog.PrintLoggerFactory(stream or sys.stderr),
        cache_logger_on_first_use=False,
    )
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[*shared, structlog.stdlib.add_logger_name],
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                structlog.processors.format_exc_info,
                structlog.processors.JSONRenderer(sort_keys=False),
            ],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING)
    structlog.contextvars.bind_contextvars(component=component)


def redact_url(url: str) -> str:
    """A store URL fit to print: any password replaced by ***."""
    scheme, sep, rest = url.partition("://")
    if sep and "@" in rest:
        creds, _, host = rest.rpartition("@")
        user = creds.split(":", 1)[0]
        return f"{scheme}://{user}:***@{host}"
    return url


def get_logger(**initial: Any) -> Any:
    return structlog.get_logger(**initial)
