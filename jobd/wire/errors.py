"""The two ways a call to the broker fails, as the clients raise them (`client.py`), the
one sentence a refusal is said in, and `Redirected`: a standby's 307 naming the leader,
which the clients follow (`failover.py`).

Apart from the clients, and plain standard library, so that what only catches them (the
`job` command's error lines, the agent) need not load httpx to do it, nor the plain
clients (`cli/plain_http.py`, `wire/plain_async.py`) to word a refusal.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = [
    "LEADER_HEADER",
    "ApiError",
    "BrokerUnreachable",
    "Redirected",
    "error_message",
    "redirected",
]


class ApiError(Exception):
    """The broker refused a request; `message` is its one-sentence reason."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class BrokerUnreachable(ConnectionError):
    """No answer from the broker: refused, unresolvable, timed out or cut off.

    `sent`: the request may have reached the broker (the connection failed after it
    went out), so a write may have been applied; False when no connection was made.
    """

    def __init__(self, server: str, message: str, *, sent: bool = True) -> None:
        super().__init__(message)
        self.server = server
        self.message = message
        self.sent = sent


class Redirected(Exception):
    """A standby broker's 307: the same request is for the leader at `leader` (its
    `X-Jobd-Leader`), or at `location` (the whole URL) when that header is missing."""

    def __init__(self, server: str, leader: str | None, location: str | None) -> None:
        super().__init__(f"the broker at {server} sent the request on to {leader or location}")
        self.server = server
        self.leader = leader
        self.location = location


if TYPE_CHECKING:  # a type only: a Protocol class costs every client its making
    from typing import Protocol

    class Answer(Protocol):
        """What `error_message` reads of a refusal: an httpx.Response, or plain_http's Reply."""

        @property
        def status_code(self) -> int: ...

        @property
        def reason_phrase(self) -> str: ...

        @property
        def headers(self) -> Any: ...

        def json(self) -> Any: ...


def error_message(response: Answer) -> str:
    """The body's `detail`, flattened to one sentence whatever shape the server used."""
    try:
        detail = response.json().get("detail")
    except (ValueError, AttributeError):
        detail = None
    if isinstance(detail, str) and detail:
        return detail
    # FastAPI's own validation errors: a list of {loc, msg}; the first one says enough.
    if isinstance(detail, list) and detail and isinstance(detail[0], dict):
        first = detail[0]
        where = ".".join(str(p) for p in first.get("loc", []) if p != "body")
        return f"{where}: {first.get('msg', 'invalid')}" if where else str(first.get("msg"))
    return f"the broker answered {response.status_code} {response.reason_phrase}"


LEADER_HEADER = "X-Jobd-Leader"


def redirected(server: str, response: Answer) -> Redirected | None:
    """The Redirected a 307 answer means; None for any other answer."""
    if response.status_code != 307:
        return None
    headers = response.headers
    return Redirected(server, headers.get(LEADER_HEADER), headers.get("Location"))
