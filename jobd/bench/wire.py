"""A lean keep-alive HTTP/1.1 connection for the benchmark's hottest loop.

httpx costs about a millisecond of client CPU per request, so on a small machine the
bench would measure itself at a few hundred requests a second. `submit` sends the same
prepared request over and over, so it needs none of httpx's generality: write the bytes,
read the status line and headers, read Content-Length bytes. Anything unexpected (no
Content-Length, a closed connection) is an error, not a fallback.

`run` sends one of the wire's calls (jobd.wire.calls) the same way and reads its answer
with the call's own reader, so a simulated agent's heartbeat (`scale`) says what the
agent's does, without httpx's cost in the process that simulates a thousand agents.
There a connection idle past the broker's keep-alive is opened again and the call sent
once more, as the agent's client would.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, TypeVar
from urllib.parse import urlsplit

import httpx

from jobd.bench.harness import BrokerError, Endpoint
from jobd.wire.calls import Call
from jobd.wire.client import ApiError

T = TypeVar("T")

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

        self.reopened = 0  # connections the broker had closed, opened again by `run`

    async def __aenter__(self) -> Connection:
        await self._open()
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self._close()

    async def _open(self) -> None:
        self._reader, self._writer = await asyncio.open_connection(
            self.host, self.port, ssl=self.tls or None, limit=_LIMIT
        )

    async def _close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            await asyncio.gather(self._writer.wait_closed(), return_exceptions=True)
            self._writer = None

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

    def request_of(self, call: Call[Any]) -> bytes:
        """A call's request as bytes: its method, path, headers and encoded body."""
        body = call.content or b""
        assert call.params is None and call.json is None, "a call with a body of bytes"
        headers = "".join(f"{name}: {value}\r\n" for name, value in call.headers.items())
        head = (
            f"{call.method} {call.url} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
            f"Authorization: Bearer {self.token}\r\n{headers}"
            f"Content-Length: {len(body)}\r\n\r\n"
        )
        return head.encode() + body

    async def run(self, call: Call[T]) -> T:
        """Send the call (again on a new connection if the broker closed this one);
        its answer read by the call's own reader, or ApiError."""
        request = self.request_of(call)
        try:
            status, body = await self._exchange(request)
        except (ConnectionError, asyncio.IncompleteReadError):
            self.reopened += 1
            await self._close()
            await self._open()
            status, body = await self._exchange(request)
        response = httpx.Response(status, content=body)
        if status >= 400:
            raise ApiError(status, body[:200].decode(errors="replace"))
        return call.parse(response)

    async def _exchange(self, request: bytes) -> tuple[int, bytes]:
        if self._writer is None:
            await self._open()
        assert self._reader is not None and self._writer is not None
        self._writer.write(request)
        head = await self._reader.readuntil(b"\r\n\r\n")
        status, length = _parse_head(head)
        return status, await self._reader.readexactly(length)


def _parse_head(head: bytes) -> tuple[int, int]:
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            return status, int(value)
    raise BrokerError(f"an answer without Content-Length: {lines[0]}")
