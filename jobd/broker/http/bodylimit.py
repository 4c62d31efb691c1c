"""Request bodies capped per route, before anything reads them (413).

Each route of the wire declares its cap (`Route.max_body`); the broker's one ASGI layer
ahead of FastAPI (fastpath.py's `FastRoutes`) enforces it here for every request, after
the worker protocol's check and before a standby's redirect: a Content-Length over the cap
is refused before a byte of the body is read, and a streamed (chunked) body is counted
as it arrives and refused at the first byte past the cap. Whoever reads the body — the
fast path, FastAPI's parsing, a route reading raw bytes — meets `BodyTooLarge` instead
of the bytes, so no parser ever sees more than the cap. Next stage: standby.py.

The refusal is sent at once, then the connection lingers, as nginx's lingering close
does: what the client still sends of the body is read and dropped (at most
`LINGER_BYTES`, `LINGER_S` in all, `LINGER_IDLE_S` between reads) before the connection
closes. A client that sends its whole body before reading an answer (Python's urllib,
`requests` without streaming) would otherwise meet a connection reset instead of the 413:
a socket closed with unread bytes in its buffer answers the client's next segment with a
RST, which drops the answer the client has not yet read. A client that waits for
`100 Continue` is not lingered on: it sends nothing once it has the answer.
"""

from __future__ import annotations

import asyncio
import json
import time

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from jobd.wire.routes import SMALL_BODY, body_cap

__all__ = [
    "LINGER_BYTES",
    "LINGER_IDLE_S",
    "LINGER_S",
    "BodyTooLarge",
    "cap_needed",
    "capped",
    "refusal",
]

# Bounds on what a refused body may still cost: past them the connection just closes.
LINGER_BYTES = 64 * 1024 * 1024
LINGER_S = 10.0
LINGER_IDLE_S = 2.0


class BodyTooLarge(HTTPException):
    """Raised by the receive of a request whose body passed its route's cap.

    An HTTPException, so FastAPI's body parsing lets it through as it is (anything else
    it would turn into a 400), and the app's handler answers it like every refusal.
    """

    def __init__(self, cap: int, more_body: bool = True) -> None:
        super().__init__(413, f"body: larger than this route's cap of {cap:,} bytes")
        self.more_body = more_body  # whether the client has more of the body to send


def refusal(cap: int) -> bytes:
    return json.dumps({"detail": BodyTooLarge(cap).detail}).encode()


def cap_needed(scope: Scope) -> bool:
    """Whether the request's body must pass `capped`. No route's cap is under SMALL_BODY,
    so a small body declared (every create, report and heartbeat) or none at all passes
    without looking its route up."""
    declared, chunked = _framing(scope)
    return chunked or (declared is not None and declared > SMALL_BODY)


async def capped(app: ASGIApp, scope: Scope, receive: Receive, send: Send) -> None:
    """`app` serving an HTTP request whose body its route's cap bounds (413 past it)."""
    declared, _chunked = _framing(scope)
    cap = body_cap(scope["method"], scope["path"])
    if declared is not None:  # the server reads no more than it declares
        if declared > cap:
            await _refuse(send, cap, receive, _lingers(scope))
        else:
            await app(scope, receive, send)
        return
    started = False

    async def send_tracked(message: Message) -> None:
        nonlocal started
        started = started or message["type"] == "http.response.start"
        await send(message)

    try:
        await app(scope, _counted(receive, cap), send_tracked)
    except BodyTooLarge as refused:
        if started:
            raise
        await _refuse(send, cap, receive, _lingers(scope) and refused.more_body)


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
            raise BodyTooLarge(cap, bool(message.get("more_body", False)))
        return message

    return counting


def _lingers(scope: Scope) -> bool:
    """Whether to read on after refusing: not for a client waiting for `100 Continue`."""
    return not any(
        name == b"expect" and value.lower() == b"100-continue" for name, value in scope["headers"]
    )


async def _refuse(send: Send, cap: int, receive: Receive, linger: bool) -> None:
    body = refusal(cap)
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),  # the unread body is not worth reading to keep it open
    ]
    await send({"type": "http.response.start", "status": 413, "headers": headers})
    # The answer's bytes go out now; the response ends (and the server closes the
    # connection) only after the linger, while receive() still hands over the body.
    await send({"type": "http.response.body", "body": body, "more_body": linger})
    if linger:
        await _drain(receive)
        await send({"type": "http.response.body", "body": b""})


async def _drain(receive: Receive) -> None:
    """Read and drop the rest of the body, within the linger's bounds."""
    ends, dropped = time.monotonic() + LINGER_S, 0
    while dropped <= LINGER_BYTES:
        wait = min(LINGER_IDLE_S, ends - time.monotonic())
        if wait <= 0:
            return
        try:
            message = await asyncio.wait_for(receive(), wait)
        except (TimeoutError, BodyTooLarge):
            return
        if message["type"] != "http.request" or not message.get("more_body", False):
            return
        dropped += len(message.get("body", b""))
