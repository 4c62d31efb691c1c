"""Bearer-token authentication as a plain ASGI middleware (CONTRACT.md §8).

Every request but the monitors' and the dashboard's (whose pages answer to a session
cookie, broker/ui/sessions.py) needs a token. The middleware resolves it to a
`Principal` (one SHA-256 and one dict hit: broker/auth/tokens.py) before any routing runs,
refuses what is not a valid token (401), refuses a route the principal's role may not
call at all (403, access.ROLES), and leaves the principal in the ASGI scope, where the
handlers (FastAPI's and the fast path's alike) find it for what else they check.
"""

from __future__ import annotations

import json

from starlette.types import ASGIApp, Receive, Scope, Send

from jobd.broker.auth.access import PRINCIPAL, refusal
from jobd.broker.auth.tokens import Tokens
from jobd.wire.routes import PUBLIC_PATHS, find_route, is_ui_path

__all__ = ["PUBLIC_PATHS", "TokenAuth"]

_UNAUTHORIZED = json.dumps({"detail": "a valid bearer token is required (see JOBD_TOKEN)"}).encode()
_HEADERS = [(b"content-type", b"application/json")]


class TokenAuth:
    def __init__(self, app: ASGIApp, tokens: Tokens) -> None:
        self.app = app
        self.tokens = tokens

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope["path"] if scope["type"] == "http" else ""
        # The dashboard's pages check their session cookie themselves (broker/ui/).
        if scope["type"] != "http" or path in PUBLIC_PATHS or is_ui_path(path):
            await self.app(scope, receive, send)
            return
        who = None
        for name, value in scope["headers"]:
            if name == b"authorization":
                who = self.tokens.resolve(value)
                break  # the first Authorization header counts, as before
        if who is None:
            headers = [*_HEADERS, (b"www-authenticate", b"Bearer")]
            await _send(send, 401, headers, _UNAUTHORIZED)
            return
        route = find_route(scope["method"], scope["path"])
        refused = refusal(who, route) if route is not None else None
        if refused is not None:
            await _send(send, 403, _HEADERS, json.dumps({"detail": refused}).encode())
            return
        scope[PRINCIPAL] = who
        await self.app(scope, receive, send)


async def _send(send: Send, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
