"""A standby broker sends writes to the leader: 307 with its URL, or 503 while none leads.

Every request that is not a read (any method but GET, HEAD and OPTIONS: the user's
verbs, and every worker route — registration, heartbeat, reports, log appends) is
answered here (`redirect`, called by fastpath.py's `FastRoutes` after the body caps and
before its fast routes or FastAPI) while this broker does not lead
(broker/leadership.py). With a leader known: **307 Temporary Redirect**, `Location` the
leader's advertised URL with the same path and query, and `X-Jobd-Leader` naming it; a
client sends the same method, body and credentials there (one hop). With none known
(an election under way): **503** with `Retry-After: 1`. Reads are served here, from the
store: a leader's request costs `FastRoutes` a set look-up and the lease's clock.
Next stage: the fast routes (fastpath.py).

The body the client sent is read and dropped first, so the connection can be reused
and the client's last segment meets no reset (see bodylimit.py's lingering close).
"""

from __future__ import annotations

import json

from starlette.types import Receive, Scope, Send

from jobd.broker.http.bodylimit import BodyTooLarge
from jobd.broker.leadership import Leadership

__all__ = ["LEADER_HEADER", "READS", "redirect"]

LEADER_HEADER = "x-jobd-leader"
READS = frozenset({"GET", "HEAD", "OPTIONS"})


async def redirect(scope: Scope, receive: Receive, send: Send, leadership: Leadership) -> None:
    """Answer a write this standby does not take: 307 to the leader, 503 while none leads."""
    await _drain(receive)
    leader = leadership.leader_url
    if leader is None:
        detail = "no broker leads at the moment (an election is under way): retry"
        await _answer(send, 503, detail, [(b"retry-after", b"1")])
        return
    target = leader.rstrip("/") + scope.get("raw_path", scope["path"].encode()).decode()
    if scope.get("query_string"):
        target += "?" + scope["query_string"].decode("latin-1")
    headers = [(b"location", target.encode()), (LEADER_HEADER.encode(), leader.encode())]
    await _answer(send, 307, f"this broker stands by; the leader is {leader}", headers)


async def _drain(receive: Receive) -> None:
    try:
        while True:
            message = await receive()
            if message["type"] != "http.request" or not message.get("more_body"):
                return
    except BodyTooLarge:  # past the route's cap: nothing more is read
        return


async def _answer(send: Send, status: int, detail: str, headers: list[tuple[bytes, bytes]]) -> None:
    body = json.dumps({"detail": detail}).encode()
    head = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": head + headers})
    await send({"type": "http.response.body", "body": body})
