"""The two ways a call to the broker fails, as the clients raise them (`client.py`).

Apart from the clients, and plain standard library, so that what only catches them (the
`job` command's error lines, the agent) need not load httpx to do it; with the one sentence
every client makes of a refusal (`error_message`).
"""

from __future__ import annotations

from typing import Any, Protocol

__all__ = ["Answer", "ApiError", "BrokerUnreachable", "error_message"]


class Answer(Protocol):
    """What `error_message` reads of an answer: an httpx.Response, or a plain client's."""

    @property
    def status_code(self) -> int: ...

    @property
    def reason_phrase(self) -> str: ...

    def json(self) -> Any: ...


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
