"""The latency of every HTTP request, by route template, for `GET /metrics`.

A plain ASGI middleware, the outermost, so it times what a client waits for: the token
check, the body cap, the fast path (fastpath.py answers the busiest routes before
FastAPI's routing) and FastAPI's routes alike. The label is the wire's route template
(`/jobs/{job_id}/preempt`), found by the same matcher the fast path uses, never the
raw path: job ids would make the label set grow without end. A path no route takes is
labelled `other` (and its method too: any word may be sent as one).

Per request it costs a route look-up (a dict hit for the busy, untemplated routes), two
clock reads and one histogram and one counter update: microseconds (docs/operations.md
gives the measurement). `GET /watch` is a long poll: its time is mostly the wait it
asked for.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Histogram
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from jobd.wire.routes import find_route

__all__ = ["RequestTiming"]

# Seconds: a fast-path report takes well under a millisecond; a long poll up to a minute.
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5, 30, 60)

Observe = Callable[[float], None]


class RequestTiming:
    """Times each HTTP request and counts it by method, route template and status."""

    def __init__(self, app: ASGIApp, registry: CollectorRegistry) -> None:
        self.app = app
        self.seconds = Histogram(
            "jobd_http_request_duration_seconds",
            "Time to answer an HTTP request, by method and route template.",
            ["method", "route"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.requests = Counter(
            "jobd_http_requests",
            "HTTP requests answered, by method, route template and status code.",
            ["method", "route", "code"],
            registry=registry,
        )
        # (method, route, status) -> its histogram's and counter's children: labels() is
        # looked up once per kind of request, not once per request.
        self._children: dict[tuple[str, str, int], tuple[Observe, Callable[[], None]]] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        began = time.perf_counter()
        status = 500  # what the server answers when the app raises before it answers

        async def send_noting_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_noting_status)
        finally:
            self._record(scope, status, time.perf_counter() - began)

    def _record(self, scope: Scope, status: int, seconds: float) -> None:
        method = scope.get("method", "")
        route = find_route(method, scope.get("path", ""))
        key = (method, route.path, status) if route is not None else ("other", "other", status)
        children = self._children.get(key)
        if children is None:
            children = self._children[key] = self._children_for(*key)
        observe, count = children
        observe(seconds)
        count()

    def _children_for(
        self, method: str, route: str, status: int
    ) -> tuple[Observe, Callable[[], None]]:
        counter = self.requests.labels(method, route, str(status))
        return self.seconds.labels(method, route).observe, lambda: counter.inc()
