"""Bearer-token authentication as a plain ASGI middleware (CONTRACT.md §8).

Every request needs the admin token except the monitors' paths. A middleware checks it
before any routing or dependency resolution runs, which keeps the cost of the check to a
header comparison on the hottest paths.
"""

from __future__ import annotations

import hmac
import json

from starlette.types import ASGIApp, Receive, Scope, Send

from jobd.wire.routes import PUBLIC_PATHS

__all__ = ["PUBLIC_PATHS", "TokenAuth"]

_REFUSAL = json.dumps({"detail": "a valid bearer token is required (see JOBD_TOKEN)"}).encode()


class TokenAuth:
    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in PUBLIC_PATHS or self._allowed(scope):
            await self.app(scope, receive, send)
            return
        headers = [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")]
        await send({"type": "http.response.start", "status": 401, "headers": headers})
        await send({"type": "http.response.body", "body": _REFUSAL})

    def _allowed(self, scope: Scope) -> bool:
        for name, value in scope["headers"]:
            if name == b"authorization":
                return hmac.compare_digest(value, self.expected)
        return False
