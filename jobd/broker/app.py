"""The broker's ASGI app: FastAPI routes wired to the store and the controllers.

Routes are thin: validate, call one function of the controllers package, render. This
module is the factory: it owns the lifespan (the controller manager, the projects file
watcher, change-feed compaction, the caches' periodic resync, the watch on observed
time, the follower of other brokers' commits), authentication, and how
errors become HTTP statuses. The loops that write run only while this broker leads
(`LeaderLoops`, started and stopped by broker/leadership.py); a standby serves reads.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import anyio
import anyio.abc
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from jobd.broker import ui
from jobd.broker.auth.middleware import PUBLIC_PATHS, TokenAuth
from jobd.broker.http.fastpath import FastRoutes
from jobd.broker.http.request_timing import RequestTiming
from jobd.broker.http.responses import ERROR_STATUSES, status_for, validation_detail
from jobd.broker.routes import arrays, jobs, system, tokens, workers
from jobd.broker.state import BrokerConfig, BrokerState
from jobd.broker.wiring import resync_forever
from jobd.controllers.clock import Clock
from jobd.controllers.projects import watch_projects_file
from jobd.logconfig import get_logger, redact_url
from jobd.store.base import StoreUnavailable
from jobd.wire import routes as wire_routes

__all__ = ["LeaderLoops", "create_app"]

# FastAPI's built-in OpenTelemetry hooks (newer releases) look up the tracer, meter and
# logger providers — and the environment — on every request. jobd exports no traces, so
# they are switched off where they exist.
_NO_TELEMETRY: dict[str, Any] = (
    {"telemetry": {"tracing": False, "metrics": False, "logs": False}}
    if "telemetry" in inspect.signature(FastAPI.__init__).parameters
    else {}
)

log = get_logger()


async def _refused(_request: Request, exc: Exception) -> JSONResponse:
    """A refusal of the layers below, with the status `status_for` gives it, as the fast
    path does (Starlette picks a handler by the exception's MRO, not by ERROR_STATUSES'
    order, so one handler decides for all)."""
    return JSONResponse({"detail": str(exc)}, status_code=status_for(exc) or 500)


async def _validation_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    return JSONResponse({"detail": validation_detail(exc.errors())}, status_code=422)


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    """Starlette's and FastAPI's own refusals, in the API's one error body.

    FastAPI answers a body it could not parse (not UTF-8, nested past Python's recursion
    limit) with a 400 of its own; here it is the 422 every other bad body gets.
    """
    assert isinstance(exc, HTTPException)
    if exc.status_code == 400:
        return JSONResponse({"detail": _unparsable(exc.__cause__)}, status_code=422)
    headers = dict(exc.headers or {})
    if exc.status_code == 405:  # every method of the path, not only its first route's
        headers["Allow"] = ", ".join(wire_routes.allowed_methods(request.url.path))
    return JSONResponse({"detail": str(exc.detail)}, exc.status_code, headers=headers)


def _unparsable(cause: BaseException | None) -> str:
    if isinstance(cause, RecursionError):
        return "body: nested too deeply to parse"
    if isinstance(cause, UnicodeDecodeError):
        return f"body: not UTF-8 text ({cause.reason} at byte {cause.start})"
    return "body: not a JSON document"


def create_app(config: BrokerConfig, clock: Clock | None = None) -> FastAPI:
    state = BrokerState(config, clock)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        async with anyio.create_task_group() as tg:
            serving: dict[str, Callable[[], Awaitable[None]]] = {
                "storage_watch": state.storage.run,
                "observed_time": state.ctx.observed.watch,
                "tokens": partial(_tokens_forever, state),
            }
            if state.follows:  # leader and standby alike hear other brokers' commits
                serving["follow"] = state.follower.run
            for name, run in serving.items():
                tg.start_soon(_keep_running, state, name, run)
            await tg.start(state.leadership.run)  # the first try at the lease, then serve
            loops = LeaderLoops(state, tg, _leader_tasks(state))
            if state.leadership.is_leader:  # SQLite: the one broker, leading from the start
                loops.start()
            state.leadership.on_gained(loops.lead)
            state.leadership.on_lost(loops.stop)
            log.info(
                "broker_started", store=redact_url(config.store_url), log_dir=str(config.log_dir)
            )
            yield
            tg.cancel_scope.cancel()
        state.leadership.resign()
        state.close()

    app = FastAPI(
        title="jobd",
        version="1",
        description="The jobd broker: jobs, projects and workers as declarative resources.",
        lifespan=lifespan,
        # CONTRACT.md §8: only health and metrics answer without a token, so the
        # OpenAPI document is served by an authenticated route below, and no docs UI.
        openapi_url=None,
        docs_url=None,
        redoc_url=None,
        **_NO_TELEMETRY,
    )
    app.state.broker = state
    for exc_type, _status in ERROR_STATUSES:
        app.add_exception_handler(exc_type, _refused)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(HTTPException, _http_error)
    fast = (*jobs.FAST, *arrays.FAST, *workers.FAST, *system.FAST)
    # The last added is the outermost: RequestTiming, TokenAuth, then FastRoutes (the
    # worker protocol, the body caps, a standby's redirect of writes, the fast path).
    app.add_middleware(FastRoutes, state=state, routes=fast)
    app.add_middleware(TokenAuth, tokens=state.tokens, people=state.people)
    app.add_middleware(RequestTiming, registry=state.metrics)  # times all of the above
    # Routes are matched in order: the busiest (creates, reports, watches) first.
    for router in (
        jobs.router,
        arrays.router,
        workers.router,
        system.router,
        tokens.router,
    ):
        app.include_router(router)
    app.include_router(system.public)
    ui.install(app, state)  # the dashboard at /ui, and the login-code route of `job ui`

    @app.get(wire_routes.OPENAPI.path, include_in_schema=False)
    async def openapi() -> JSONResponse:
        return JSONResponse(_with_bearer_scheme(app.openapi()))

    return app


def _leader_tasks(state: BrokerState) -> dict[str, Callable[[], Awaitable[None]]]:
    """What only the leader runs: the reconcile loops, and every loop that writes."""
    tasks: dict[str, Callable[[], Awaitable[None]]] = {
        "manager": state.manager.run,
        "compact": partial(_compact_forever, state),
        "checkpoint": partial(_checkpoint_forever, state),
        "resync": partial(resync_forever, state.wiring, state.ctx),
        "notify": state.outbox.run,
    }
    if state.config.projects_file is not None:
        tasks["projects_file"] = partial(watch_projects_file, state.ctx, state.config.projects_file)
    return tasks


class LeaderLoops:
    """The leader's loops, started when this broker is elected and cancelled when it
    steps down, inside the lifespan's task group (broker/leadership.py calls `lead` and
    `stop`)."""

    def __init__(
        self,
        state: BrokerState,
        tg: anyio.abc.TaskGroup,
        tasks: dict[str, Callable[[], Awaitable[None]]],
    ) -> None:
        self.state, self.tg, self.tasks = state, tg, tasks
        self.scope: anyio.CancelScope | None = None

    async def lead(self, epoch: int) -> None:
        await self.state.lead(epoch)
        self.start()

    def start(self) -> None:
        self.stop()
        self.scope = anyio.CancelScope()
        self.tg.start_soon(self._run, self.scope)

    def stop(self) -> None:
        if self.scope is not None:
            self.scope.cancel()
            self.scope = None

    async def _run(self, scope: anyio.CancelScope) -> None:
        with scope:
            async with anyio.create_task_group() as loops:
                for name, run in self.tasks.items():
                    loops.start_soon(_keep_running, self.state, name, run)


def _with_bearer_scheme(document: dict[str, Any]) -> dict[str, Any]:
    """The OpenAPI document says every route but the monitors' needs the bearer token,
    and what each path parameter takes (as parse_path_param checks it)."""
    for operations in document.get("paths", {}).values():
        for operation in operations.values():
            for param in operation.get("parameters", ()):
                if param["in"] == "path" and param["name"] in wire_routes.PATH_PARAM_SCHEMAS:
                    param["schema"] = dict(wire_routes.PATH_PARAM_SCHEMAS[param["name"]])
    components = document.setdefault("components", {})
    components["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
    document["security"] = [{"bearer": []}]
    for path, operations in document.get("paths", {}).items():
        for operation in operations.values():
            if path in PUBLIC_PATHS:
                operation["security"] = []
                continue
            responses = operation.setdefault("responses", {})
            for status, said in _AUTH_ANSWERS.items():
                responses.setdefault(status, {"description": said, "content": _DETAIL})
    return document


_DETAIL = {
    "application/json": {"schema": {"type": "object", "properties": {"detail": {"type": "string"}}}}
}
_AUTH_ANSWERS = {
    "401": "No valid bearer token",
    "403": "The token's role or scope does not allow this (the detail names the project or worker)",
}


async def _keep_running(
    state: BrokerState, name: str, run: Callable[[], Awaitable[None]], max_delay_s: float = 30.0
) -> None:
    """Run one of the lifespan's loops, and run it again if it ever raises.

    An exception escaping one of them would end the task group, and with it every loop,
    while HTTP went on serving. A loop that fails is logged (`background_task_failed`),
    marked down for /healthz until it is running again, and restarted with backoff.
    """
    delay = 0.5
    while True:
        try:
            await run()
            return
        except Exception as exc:
            state.tasks_down[name] = f"{type(exc).__name__}: {exc}"
            log.exception("background_task_failed", task=name, retry_s=delay)
        await anyio.sleep(delay)
        state.tasks_down.pop(name, None)
        delay = min(delay * 2, max_delay_s)


async def _compact_forever(state: BrokerState) -> None:
    while True:
        await anyio.sleep(60)
        try:
            removed = state.store.compact(state.config.compact_keep)
        except StoreUnavailable as exc:  # tried again in a minute
            log.warning("compaction_failed", error=str(exc))
            continue
        if removed:
            log.info("changes_compacted", removed=removed)


async def _tokens_forever(state: BrokerState, flush_every: int = 60) -> None:
    """Tokens made or revoked against the store directly (`jobd token`) count within a
    second; when each token was last used is written once a minute, never per request."""
    ticks, failing = 0, False
    while True:
        await anyio.sleep(1.0)
        ticks += 1
        try:
            state.tokens.reload()
            if ticks % flush_every == 0 and state.leadership.is_leader:
                state.tokens.flush()
        except StoreUnavailable as exc:  # tried again next second: the table stays as read
            if not failing:  # once while the store is away, not every second
                log.warning("tokens_not_reloaded", error=str(exc))
            failing = True
            continue
        failing = False


async def _checkpoint_forever(state: BrokerState, interval_s: float = 1.0) -> None:
    """The store's log copied back in a thread, once a second when something was written.

    A checkpoint that fails (a full disk: the database file cannot grow) is retried the
    next second; the log keeps the writes meanwhile. Logged once per fault, not per try.
    """
    written, failing = -1, ""
    while True:
        await anyio.sleep(interval_s)
        if state.feed.revision == written and not failing:
            continue
        revision = state.feed.revision
        try:
            await anyio.to_thread.run_sync(state.store.checkpoint)
        except StoreUnavailable as exc:
            if str(exc) != failing:
                log.warning("checkpoint_failed", error=str(exc))
            failing = str(exc)
            continue
        written, failing = revision, ""
