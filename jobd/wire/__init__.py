"""The broker's HTTP protocol, owned in one place: routes, bodies, answers and clients.

The broker declares its routes from `routes` and parses with `models`; the worker and
the CLI build their requests from the same declarations (`calls`) and send them with one
of the clients of `client`. This package imports only pydantic, httpx and `jobd.api`,
so the worker that uses it stays light.
"""

from jobd.wire import calls, models, routes
from jobd.wire.answers import (
    ApplyResult,
    BlockersResult,
    Document,
    EventPage,
    HeartbeatAnswer,
    JobList,
    LogChunk,
    Registered,
    ReportResult,
    WatchChange,
    WatchPage,
)
from jobd.wire.calls import Call
from jobd.wire.client import (
    ApiError,
    AsyncClient,
    BaseClient,
    BrokerUnreachable,
    Client,
    error_message,
)
from jobd.wire.routes import Route

__all__ = [
    "ApiError",
    "ApplyResult",
    "AsyncClient",
    "BaseClient",
    "BlockersResult",
    "BrokerUnreachable",
    "Call",
    "Client",
    "Document",
    "EventPage",
    "HeartbeatAnswer",
    "JobList",
    "LogChunk",
    "Registered",
    "ReportResult",
    "Route",
    "WatchChange",
    "WatchPage",
    "calls",
    "error_message",
    "models",
    "routes",
]
