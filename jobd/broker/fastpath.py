"""`POST /jobs` as a plain ASGI middleware, ahead of FastAPI's routing.

A storm of submits is the broker's busiest moment, and FastAPI's routing, dependency
and response machinery took more CPU per create than validating and storing the job.
This answers that one route exactly as the FastAPI route declared in routes_jobs
(which documents it in the OpenAPI schema) would: same body, same statuses, same
errors. Everything else passes through untouched.
"""

from __future__ import annotations

import json

from pydantic import ValidationError
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from jobd.api.models import Job
from jobd.broker.responses import doc, status_for, validation_detail
from jobd.broker.state import BrokerState

__all__ = ["FastCreate"]

MAX_BODY = 1024 * 1024  # one job's document; an apply of many goes to /apply
_JSON = [(b"content-type", b"application/json")]


class FastCreate:
    def __init__(self, app: ASGIApp, state: BrokerState) -> None:
        self.app = app
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != "/jobs" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        body = await _read_body(receive)
        if body is None:
            await _respond(send, 413, {"detail": f"body: larger than {MAX_BODY} bytes"})
            return
        try:
            job = Job.model_validate_json(body)
            created = await self.state.creates.create(job)
        except ValidationError as exc:
            await _respond(send, 422, {"detail": validation_detail(exc.errors())})
        except Exception as exc:
            status = status_for(exc)
            if status is None:
                raise  # a bug: the server's error handling takes it from here
            await _respond(send, status, {"detail": str(exc)})
        else:
            await _send(send, 201, doc(created).encode())


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
