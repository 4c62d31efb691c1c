"""Worker payloads taken only from the protocol versions this broker accepts (426).

Checked by fastpath.py's `FastRoutes` (the one ASGI layer after the token check) before
the body caps, with the route it found for the request. For a request to a route of
`WORKER_PAYLOADS` (registration, heartbeat, reports, output, events) it reads
`X-Jobd-Protocol` (none: `UNSTATED`, a client from before versions were sent) and
refuses a version outside `OLDEST_WORKER_PROTOCOL..PROTOCOL` with 426 and a sentence
naming both (wire/protocol.py), and a value that is no version with 422 naming the
header, before the body is read. Other routes pass untouched: a user's request is
judged by its body. Next stage: broker/http/bodylimit.py.
"""

from __future__ import annotations

import json

from starlette.types import Scope, Send

from jobd.wire.protocol import (
    OLDEST_WORKER_PROTOCOL,
    PROTOCOL,
    PROTOCOL_HEADER,
    REFUSED_STATUS,
    parse_protocol,
    worker_refusal,
)
from jobd.wire.routes import WORKER_PAYLOADS, Route

__all__ = ["refusal", "refuse"]

_HEADER = PROTOCOL_HEADER.lower().encode()
# Said with every refusal, so an agent (or its operator) reads what would be taken.
_ANSWER_HEADERS = [
    (b"content-type", b"application/json"),
    (_HEADER, str(PROTOCOL).encode()),
    (b"x-jobd-protocol-oldest-worker", str(OLDEST_WORKER_PROTOCOL).encode()),
]

_WORKER_ROUTES = frozenset(id(route) for route in WORKER_PAYLOADS)
_TAKEN = frozenset(str(v).encode() for v in range(OLDEST_WORKER_PROTOCOL, PROTOCOL + 1))


async def refuse(send: Send, status: int, detail: str) -> None:
    """Answer a refusal of `refusal`, saying the versions this broker takes."""
    body = json.dumps({"detail": detail}).encode()
    headers = [*_ANSWER_HEADERS, (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def refusal(scope: Scope, route: Route | None) -> tuple[int, str] | None:
    """The status and sentence of a worker payload's refusal; None: pass it on.

    `route`: the request's, as find_route found it (by identity: find_route answers the
    declared routes themselves, and an int's hash and equality cost less than a route's).
    """
    if route is None or id(route) not in _WORKER_ROUTES:
        return None
    stated = next((v for n, v in scope["headers"] if n == _HEADER), None)
    if stated in _TAKEN:  # what every agent of this release sends: nothing to parse
        return None
    try:
        version = parse_protocol(None if stated is None else stated.decode("latin-1"))
    except ValueError as exc:
        return 422, str(exc)
    why = worker_refusal(version)
    return None if why is None else (REFUSED_STATUS, why)
