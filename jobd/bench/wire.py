"""A lean keep-alive HTTP/1.1 connection for the benchmark's hottest loop.

httpx costs about a millisecond of client CPU per request, so on a small machine the
bench would measure itself at a few hundred requests a second. `submit` sends the same
prepared request over and over, so it needs none of httpx's generality: write the bytes,
read the status line and headers, read Content-Length bytes. Anything unexpected (no
Content-Length, a closed connection) is an error, not a fallback.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any
from urllib.parse import urlsplit

from jobd.bench.harness import BrokerError, Endpoint

__all__ = ["Connection"]

_LIMIT = 1 << 20


class Connection:
    """One connection to the broker; `post_json` may be awaited by one task at a time."""

    def __init__(self, endpoint: Endpoint) -> None:
        url = urlsplit(endpoint.url)
        self.host = url.hostname or "127.0.0.1"
        self.tls = url.scheme == "https"
        self.port = url.port or (443 if self.tls else 80)
        self.token = endpoint.token
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def __aenter__(self) -> Connection:
        self._reader, self._writer = await asyncio.open_connection(
            self.host, self.port, ssl=self.tls or None, limit=_LIMIT
        )
        return self

    async def __aexit__(self, *_exc: object) -> None:
        if self._writer is not None:
            self._writer.close()
            await asyncio.gather(self._writer.wait_closed(), return_exceptions=True)

    def prepare(self, method: str, path: str, body: dict[str, Any]) -> bytes:
        """The request's bytes, to send as many times as needed."""
        payload = json.dumps(body).encode()
        head = (
            f"{method} {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
            f"Authorization: Bearer {self.token}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(payload)}\r\n\r\n"
        )
        return head.encode() + payload

    async def send(self, request: bytes) -> Any:
        """Send a prepared request; the decoded JSON answer, or BrokerError."""
        assert self._reader is not None and self._writer is not None, "not connected"
        self._writer.write(request)
        head = await self._reader.readuntil(b"\r\n\r\n")
        status, length = _parse_head(head)
        body = await self._reader.readexactly(length)
        if status >= 400:
            raise BrokerError(f"{request.split(b' ', 2)[1].decode()}: {status} {body[:200]!r}")
        return json.loads(body)


def _parse_head(head: bytes) -> tuple[int, int]:
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            return status, int(value)
    raise BrokerError(f"an answer without Content-Length: {lines[0]}")
