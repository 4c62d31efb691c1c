"""Request bodies capped per route, before anything reads them (413).

Each route of the wire declares its cap (`Route.max_body`); this ASGI layer, ahead of
the fast path and FastAPI, enforces it for every request: a Content-Length over the cap
is refused before a byte of the body is read, and a streamed (chunked) body is counted
as it arrives and refused at the first byte past the cap. Whoever reads the body — the
fast path, FastAPI's parsing, a route reading raw bytes — meets `BodyTooLarge` instead
of the bytes, so no parser ever sees more than the cap. Next stage: `fastpath.py`.
"""

from __future__ import annotations

import json

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from jobd.wire.routes import SMALL_BODY, body_cap

__all__ = ["BodyLimit", "BodyTooLarge", "refusal"]


class BodyTooLarge(HTTPException):
    """Raised by the receive of a request whose body passed its route's cap.

    An HTTPException, so FastAPI's body parsing lets it through as it is (anything else
    it would turn into a 400), and the app's handler answers it like every refusal.
    """

    def __init__(self, cap: int) -> None:
        super().__init__(413, f"body: larger than this route's cap of {cap:,} bytes")


def refusal(cap: int) -> bytes:
    return json.dumps({"detail": BodyTooLarge(cap).detail}).encode()


class BodyLimit:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared, chunked = _framing(scope)
        # No route's cap is under SMALL_BODY, so a small body declared (every report and
        # heartbeat) or none at all passes without looking its route up.
        if not chunked and (declared is None or declared <= SMALL_BODY):
            await self.app(scope, receive, send)
            return
        cap = body_cap(scope["method"], scope["path"])
        if declared is not None:  # the server reads no more than it declares
            if declared > cap:
                await _refuse(send, cap)
            else:
                await self.app(scope, receive, send)
            return
        started = False

        async def send_tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, _counted(receive, cap), send_tracked)
        except BodyTooLarge:
            if started:
                raise
            await _refuse(send, cap)


def _framing(scope: Scope) -> tuple[int | None, bool]:
    """The declared Content-Length, and whether the body comes chunked instead."""
    declared, chunked = None, False
    for name, value in scope["headers"]:
        if name == b"content-length":
            declared = int(value) if value.isdigit() else None
        elif name == b"transfer-encoding":
            chunked = True
    return declared, chunked


def _counted(receive: Receive, cap: int) -> Receive:
    size = 0

    async def counting() -> Message:
        nonlocal size
        message = await receive()
        size += len(message.get("body", b""))
        if size > cap:
            raise BodyTooLarge(cap)
        return message

    return counting


async def _refuse(send: Send, cap: int) -> None:
    body = refusal(cap)
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),  # the unread body is not worth reading to keep it open
    ]
    await send({"type": "http.response.start", "status": 413, "headers": headers})
    await send({"type": "http.response.body", "body": body})
