"""The busiest routes as a plain ASGI middleware, ahead of FastAPI's routing.

`POST /jobs` (a storm of submits), and what every worker sends all the time:
`GET /watch`, `POST /workers/{name}/reports` and `POST /workers/{name}/heartbeat`.
FastAPI's routing, dependency and response machinery took more CPU per request than
the work these carry. They are answered exactly as the FastAPI routes declared in
routes_jobs, routes_system and routes_workers (which document them in the OpenAPI
schema) would: same parameters and bodies, same statuses, same errors, by the same
functions. Everything else passes through untouched.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from functools import partial
from urllib.parse import parse_qsl, unquote

from pydantic import ValidationError
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from jobd.api.models import ADMISSION, Job
from jobd.broker.responses import doc, encode_json, status_for, validation_detail
from jobd.broker.routes_system import WatchQuery, run_watch
from jobd.broker.routes_workers import Heartbeat, ReportBatch, run_heartbeat, run_report_batch
from jobd.broker.state import BrokerState

__all__ = ["FastRoutes"]

MAX_BODY = 1024 * 1024  # one job's document; an apply of many goes to /apply
_JSON = [(b"content-type", b"application/json")]


class FastRoutes:
    def __init__(self, app: ASGIApp, state: BrokerState) -> None:
        self.app = app
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path: str = scope.get("path", "")
        method = scope.get("method")
        if scope["type"] != "http":
            await self.app(scope, receive, send)
        elif method == "GET" and path == "/watch":
            await self._watch(scope, send)
        elif method != "POST":
            await self.app(scope, receive, send)
        elif path == "/jobs":
            await self._answer(receive, send, self._create)
        elif (name := _worker_verb(path, "reports")) is not None:
            await self._answer(receive, send, partial(self._reports, name))
        elif (name := _worker_verb(path, "heartbeat")) is not None:
            await self._answer(receive, send, partial(self._heartbeat, name))
        else:
            await self.app(scope, receive, send)

    async def _watch(self, scope: Scope, send: Send) -> None:
        # The last of repeated parameters counts, as in FastAPI's own parsing.
        params = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
        try:
            query = WatchQuery.model_validate(params)
        except ValidationError as exc:
            await _respond(send, 422, {"detail": validation_detail(exc.errors())})
            return
        answer = await run_watch(self.state, query)
        await _send(send, 200, encode_json(answer).encode())

    async def _answer(
        self, receive: Receive, send: Send, handle: Callable[[bytes], Awaitable[tuple[int, str]]]
    ) -> None:
        body = await _read_body(receive)
        if body is None:
            await _respond(send, 413, {"detail": f"body: larger than {MAX_BODY} bytes"})
            return
        try:
            status, text = await handle(body)
        except ValidationError as exc:
            await _respond(send, 422, {"detail": validation_detail(exc.errors())})
        except Exception as exc:
            refused = status_for(exc)
            if refused is None:
                raise  # a bug: the server's error handling takes it from here
            await _respond(send, refused, {"detail": str(exc)})
        else:
            await _send(send, status, text.encode())

    async def _create(self, body: bytes) -> tuple[int, str]:
        job = Job.model_validate_json(body, context=ADMISSION)
        created = await self.state.creates.create(job)
        return 201, doc(created)

    async def _reports(self, worker: str, body: bytes) -> tuple[int, str]:
        batch = ReportBatch.model_validate_json(body)
        return 200, encode_json(run_report_batch(self.state, worker, batch))

    async def _heartbeat(self, worker: str, body: bytes) -> tuple[int, str]:
        beat = Heartbeat.model_validate_json(body)
        return 200, encode_json(run_heartbeat(self.state, worker, beat))


def _worker_verb(path: str, verb: str) -> str | None:
    """The worker's name in `/workers/{name}/{verb}`, else None."""
    head, _, name_and_tail = path.partition("/workers/")
    name, slash, tail = name_and_tail.partition("/")
    if head or not name or not slash or tail != verb:
        return None
    return unquote(name)


async def _read_body(receive: Receive) -> bytes | None:
    """The whole request body; None when it is over MAX_BODY."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message: Message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


async def _respond(send: Send, status: int, payload: dict[str, str]) -> None:
    await _send(send, status, json.dumps(payload).encode())


async def _send(send: Send, status: int, body: bytes) -> None:
    headers = [*_JSON, (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
