"""The two ways a call to the broker fails, as the clients raise them (`client.py`), and
the one sentence a refusal is said in.

Apart from the clients, and plain standard library, so that what only catches them (the
`job` command's error lines, the agent) need not load httpx to do it, nor the plain
clients (`cli/plain_http.py`, `wire/plain_async.py`) to word a refusal.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = ["ApiError", "BrokerUnreachable", "error_message"]


class ApiError(Exception):
    """The broker refused a request; `message` is its one-sentence reason."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class BrokerUnreachable(ConnectionError):
    """No answer from the broker: refused, unresolvable, timed out or cut off."""

    def __init__(self, server: str, message: str) -> None:
        super().__init__(message)
        self.server = server
        self.message = message


if TYPE_CHECKING:  # a type only: a Protocol class costs every client its making
    from typing import Protocol

    class Answer(Protocol):
        """What `error_message` reads of a refusal: an httpx.Response, or plain_http's Reply."""

        @property
        def status_code(self) -> int: ...

        @property
        def reason_phrase(self) -> str: ...

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
