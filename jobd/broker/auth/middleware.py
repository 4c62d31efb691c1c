"""Authentication as a plain ASGI middleware (CONTRACT.md §8): a token, or the socket's peer.

Every request but the monitors' and the dashboard's (whose pages answer to a session
cookie, broker/ui/sessions.py) needs an identity. A request over the broker's Unix socket
has one already: the uid the kernel gave its connection (`PEER` in the scope, set by the
connection itself, broker/http/connections.py), made a principal by broker/auth/people.py;
its Authorization and `X-Jobd-User` headers are not read at all. Any other request needs
a bearer token, resolved to a `Principal` (one SHA-256 and one dict hit:
broker/auth/tokens.py); a user token of a user, or a worker token vouching for one, then
becomes that person's principal (people.py).

The middleware refuses what is not a valid identity (401, 403 for a person it cannot
make), refuses a route the principal's role may not call at all (403, access.ROLES), and
leaves the principal in the ASGI scope, where the handlers (FastAPI's and the fast
path's alike) find it for what else they check.
"""

from __future__ import annotations

import json

from starlette.types import ASGIApp, Receive, Scope, Send

from jobd.api.identity import check_user_name
from jobd.broker.auth.access import PRINCIPAL, refusal
from jobd.broker.auth.people import VOUCH_HEADER, NotAPerson, People
from jobd.broker.auth.tokens import USER, WORKER, Principal, Tokens
from jobd.broker.http.connections import PEER
from jobd.wire.routes import PUBLIC_PATHS, find_route, is_ui_path

__all__ = ["PUBLIC_PATHS", "TokenAuth"]

_UNAUTHORIZED = json.dumps({"detail": "a valid bearer token is required (see JOBD_TOKEN)"}).encode()
_HEADERS = [(b"content-type", b"application/json")]


class TokenAuth:
    def __init__(self, app: ASGIApp, tokens: Tokens, people: People | None = None) -> None:
        self.app = app
        self.tokens = tokens
        self.people = people or People({})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope["path"] if scope["type"] == "http" else ""
        # The dashboard's pages check their session cookie themselves (broker/ui/).
        if scope["type"] != "http" or path in PUBLIC_PATHS or is_ui_path(path):
            await self.app(scope, receive, send)
            return
        try:
            who = self._identify(scope)
        except NotAPerson as exc:
            await _send(send, 403, _HEADERS, json.dumps({"detail": str(exc)}).encode())
            return
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

    def _identify(self, scope: Scope) -> Principal | None:
        """The request's principal; None: no valid token. A socket peer's uid wins over
        anything its headers say."""
        peer = scope.get(PEER)
        if peer is not None:
            return self.people.peer(peer.uid)
        who = None
        for name, value in scope["headers"]:
            if name == b"authorization":
                who = self.tokens.resolve(value)
                break  # the first Authorization header counts, as before
        if who is None:
            return None
        if who.role == WORKER:  # only a worker's word for a user is taken (people.py)
            vouched = next((v for n, v in scope["headers"] if n == VOUCH_HEADER), None)
            if vouched is not None:
                return self.people.vouched(who, _user_name(vouched))
        elif who.role == USER and who.user is not None:
            return self.people.of_token(who)
        return who  # a vouch beside any other token speaks for nobody: ignored


def _user_name(raw: bytes) -> str:
    try:
        return check_user_name(raw.decode("ascii"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise NotAPerson(f"{VOUCH_HEADER.decode()}: {exc}") from None


async def _send(send: Send, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
