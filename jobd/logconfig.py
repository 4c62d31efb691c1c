"""The structured logs of the broker and the worker: structlog JSON lines on stderr.

One event a line, with `ts`, `level`, `event` and `component` (schema in docs/events.md).
This module imports nothing of jobd's, so the worker and the CLI can log without loading
the store; the broker's record of events (events.jsonl) is `broker/streams/eventlog.py`.
"""

from __future__ import annotations

import logging
import sys
from typing import Any, TextIO

import structlog

__all__ = ["configure_logging", "get_logger", "redact_url"]


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
