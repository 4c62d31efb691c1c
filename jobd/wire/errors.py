"""The two ways a call to the broker fails, as the clients raise them (`client.py`).

Apart from the clients, and plain standard library, so that what only catches them (the
`job` command's error lines) need not load httpx to do it.
"""

from __future__ import annotations

__all__ = ["ApiError", "BrokerUnreachable"]


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
