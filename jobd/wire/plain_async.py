"""The agent's HTTP client for a broker at an http:// address: h11 over anyio streams.

A request through httpx cost the agent 0.83-0.88 ms of CPU (its URL and header models,
the pool's bookkeeping, httpcore's trace hooks), this client's 0.37-0.44 ms (most of it
h11's framing), and the agent makes about one request per job (the watch long-poll,
report batches; docs/performance.md). This client sends the same `Call`s over kept-alive
HTTP/1.1 connections on anyio streams, with h11 (the sans-IO protocol library httpcore is
built on) framing the messages: the same requests (`wire.plain_http`), answers read by
the same parsers, the same one-sentence errors, the timeouts of httpx's `Timeout(10)`
(connect, write, each read, waiting for a connection; a held call's reads outlast its
hold), and as httpcore does, a kept-alive connection idle longer than KEEPALIVE_S or
closed by the broker is replaced before anything is sent on it, with no retry of a
request once sent. One connection per request in flight (the watch, a report batch, a
heartbeat at once), at most `max_connections`. An https:// broker or a proxy in the
environment goes through the wire's httpx `AsyncClient` (`open_async_client` chooses, for
each broker of the agent's list: failover.py asks them in turn).
Next stage: the broker's routes.
"""

from __future__ import annotations

import select
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast
from urllib.parse import urlsplit

import anyio
import anyio.abc
import h11

from jobd.discovery import usable_token
from jobd.wire import protocol
from jobd.wire.closing import AsyncClosing
from jobd.wire.errors import ApiError, BrokerUnreachable, error_message, redirected
from jobd.wire.failover import AsyncFailoverClient, connect_timeout
from jobd.wire.plain_http import HOLD_MARGIN_S, Reply, plain_http_serves, request_body, target
from jobd.wire.protocol import PROTOCOL_HEADER

if TYPE_CHECKING:
    import httpx

    from jobd.wire.calls import Call
    from jobd.wire.client import AsyncClient as AsyncClientType

__all__ = ["KEEPALIVE_S", "AsyncSender", "PlainAsyncClient", "open_async_client"]

T = TypeVar("T")
# httpx's keepalive_expiry: an idle connection older than this is closed, not reused.
KEEPALIVE_S = 5.0
_READ_SIZE = 65536
_DISCONNECTED = "Server disconnected without sending a response."  # httpcore's words


class AsyncSender(Protocol):
    """What the agent needs of a client: send a call, get its answer's value."""

    async def run(self, call: Call[T]) -> T: ...

    async def aclose(self) -> None: ...


class _Unreachable(Exception):
    """Why an exchange failed, before it becomes the client's BrokerUnreachable."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class _Connection:
    """One kept-alive HTTP/1.1 connection: h11's state beside the socket's stream.

    An exchange runs in one cancel scope whose deadline moves before each write and each
    read (httpx's timeouts are per operation): a scope per operation cost more than h11.
    """

    def __init__(self, stream: anyio.abc.SocketStream) -> None:
        self.stream = stream
        self.socket = stream.extra(anyio.abc.SocketAttribute.raw_socket)
        self.protocol = h11.Connection(h11.CLIENT)
        self.idle_since = time.monotonic()
        self._timer = anyio.CancelScope()

    def reusable(self) -> bool:
        """Idle, young enough, and not closed by the broker meanwhile (a closed socket
        reads as ready: its end)."""
        if self.protocol.our_state is not h11.IDLE:
            return False
        if time.monotonic() - self.idle_since > KEEPALIVE_S:
            return False
        # poll, not select: an agent's descriptors may number past select's 1024.
        readable = select.poll()
        readable.register(self.socket, select.POLLIN)
        return not readable.poll(0)

    async def exchange(self, head: h11.Request, body: bytes | None, timeouts: _Timeouts) -> Reply:
        """Send one request and read its whole answer; _Unreachable when the connection
        fails, TimeoutError when a write or a read takes too long."""
        with anyio.CancelScope() as self._timer:
            return await self._exchange(head, body, timeouts)
        raise TimeoutError  # only the timer's deadline ends the scope without an answer

    async def _exchange(self, head: h11.Request, body: bytes | None, timeouts: _Timeouts) -> Reply:
        protocol = self.protocol
        data = protocol.send(head) or b""
        if body:
            data += protocol.send(h11.Data(data=body)) or b""
        data += protocol.send(h11.EndOfMessage()) or b""
        self._timer.deadline = anyio.current_time() + timeouts.write
        await self._send(data)
        reply = await self._read_answer(timeouts.read)
        if protocol.our_state is h11.DONE and protocol.their_state is h11.DONE:
            protocol.start_next_cycle()
            self.idle_since = time.monotonic()
        return reply

    async def _send(self, data: bytes) -> None:
        try:
            await self.stream.send(data)
        except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
            raise _Unreachable(_reason(exc)) from None

    async def _read_answer(self, read_timeout: float) -> Reply:
        status, reason, headers, chunks = 0, "", _Headers([]), []
        while True:
            event = await self._next_event(read_timeout)
            if isinstance(event, h11.Response):
                status, reason = event.status_code, event.reason.decode("latin-1")
                headers = _Headers(event.headers)
            elif isinstance(event, h11.Data):
                chunks.append(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage):
                return Reply(status, reason, headers, b"".join(chunks))
            elif isinstance(event, h11.ConnectionClosed):
                raise _Unreachable(_DISCONNECTED)
            # An InformationalResponse (1xx) says nothing the answer needs.

    async def _next_event(self, read_timeout: float) -> object:
        """h11's next event of the answer, reading from the socket while it needs data."""
        protocol = self.protocol
        try:
            while (event := protocol.next_event()) is h11.NEED_DATA:
                protocol.receive_data(await self._receive(read_timeout))
        except h11.RemoteProtocolError as exc:
            raise _Unreachable(str(exc) or _DISCONNECTED) from None
        return event

    async def _receive(self, read_timeout: float) -> bytes:
        self._timer.deadline = anyio.current_time() + read_timeout
        try:
            return await self.stream.receive(_READ_SIZE)
        except anyio.EndOfStream:
            if self.protocol.their_state is h11.SEND_RESPONSE:
                raise _Unreachable(_DISCONNECTED) from None
            return b""  # h11 decides: an answer framed by the close ends here
        except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
            raise _Unreachable(_reason(exc)) from None

    async def aclose(self) -> None:
        with anyio.CancelScope(shield=True):
            await self.stream.aclose()


class _Timeouts:
    """httpx's four timeouts of one request; a held call's read outlasts its hold."""

    def __init__(self, seconds: float, hold: float | None, connect: float) -> None:
        self.write = self.pool = seconds
        self.connect = min(seconds, connect)
        self.read = seconds if hold is None else hold + HOLD_MARGIN_S


class _Headers:
    """An answer's headers, read case-insensitively (`.get`) as the parsers read httpx's."""

    def __init__(self, pairs: Iterable[tuple[bytes, bytes]]) -> None:
        self._values = {name.decode("latin-1"): value.decode("latin-1") for name, value in pairs}

    def get(self, name: str, default: str | None = None) -> str | None:
        return self._values.get(name.lower(), default)


class PlainAsyncClient(AsyncClosing):
    """Sends calls to one http:// broker over a few kept-alive connections; use it as an
    async context manager or aclose()."""

    def __init__(
        self,
        server: str,
        token: str | None,
        *,
        timeout: float = 10.0,
        max_connections: int = 4,
        user_agent: str = "jobd-client",
        connect_timeout: float | None = None,
    ) -> None:
        self.server = server.rstrip("/")
        parts = urlsplit(self.server)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"the broker address {self.server!r} must start with http://")
        self._host, self._port = parts.hostname, parts.port or 80
        self._base_path = parts.path.rstrip("/")
        self.timeout = timeout
        self.connect_timeout = timeout if connect_timeout is None else connect_timeout
        host = parts.netloc.rpartition("@")[2]  # as httpx says it: host[:port]
        self._headers = [
            ("Host", host),
            ("Accept", "*/*"),
            ("Connection", "keep-alive"),
            ("User-Agent", user_agent),
            (PROTOCOL_HEADER, str(protocol.PROTOCOL)),
        ]
        token = usable_token(token, "the token given")  # TokenError (a ValueError), never sent
        if token:
            self._headers.append(("Authorization", f"Bearer {token}"))
        self._idle: list[_Connection] = []
        self._slots = anyio.Semaphore(max_connections)

    async def run(self, call: Call[T]) -> T:
        """Send the call; its answer's value, or ApiError / BrokerUnreachable."""
        reply = await self._send(call)
        if reply.is_error:
            raise ApiError(reply.status_code, error_message(reply))
        moved = redirected(self.server, reply)
        if moved is not None:  # a standby's: failover.py sends the call on
            raise moved
        return call.parse(cast("httpx.Response", reply))

    async def _send(self, call: Call[Any]) -> Reply:
        timeouts = _Timeouts(self.timeout, call.hold, self.connect_timeout)
        head, body = self._request(call)
        await self._take_slot(timeouts.pool)
        try:
            connection = await self._connection(timeouts.connect)
            return await self._exchange(connection, head, body, timeouts)
        finally:
            self._slots.release()

    async def _take_slot(self, pool_timeout: float) -> None:
        """A place among the requests in flight, waiting at most `pool_timeout` for one."""
        try:
            self._slots.acquire_nowait()
        except anyio.WouldBlock:
            try:
                with anyio.fail_after(pool_timeout):
                    await self._slots.acquire()
            except TimeoutError:
                said = "the jobd broker at {server} did not answer in time"
                raise self._unreachable(said, sent=False) from None

    async def _exchange(
        self, connection: _Connection, head: h11.Request, body: bytes | None, timeouts: _Timeouts
    ) -> Reply:
        """One exchange; the connection goes back to the idle ones only when it can serve
        the next (else closed, also when cancelled midway)."""
        kept = False
        try:
            reply = await connection.exchange(head, body, timeouts)
            kept = connection.protocol.our_state is h11.IDLE
            return reply
        except TimeoutError:
            raise self._unreachable("the jobd broker at {server} did not answer in time") from None
        except _Unreachable as exc:
            said = f"lost the connection to the jobd broker at {{server}} ({exc.message})"
            raise self._unreachable(said) from None
        finally:
            if kept:
                self._idle.append(connection)
            else:
                await connection.aclose()

    async def _connection(self, connect_timeout: float) -> _Connection:
        """The most recently used idle connection that is still good, or a new one."""
        while self._idle:
            connection = self._idle.pop()
            if connection.reusable():
                return connection
            await connection.aclose()
        try:
            with anyio.fail_after(connect_timeout):
                stream = await anyio.connect_tcp(self._host, self._port)
        except (OSError, TimeoutError):  # refused, no such host, or no answer in time
            said = "cannot reach the jobd broker at {server} (is `jobd dev` running?)"
            raise self._unreachable(said, sent=False) from None
        return _Connection(stream)

    def _request(self, call: Call[Any]) -> tuple[h11.Request, bytes | None]:
        body, body_headers = request_body(call)
        headers = [*self._headers, *body_headers.items()]
        if body is not None or call.method in ("POST", "PUT", "PATCH"):
            headers.append(("Content-Length", str(len(body or b""))))
        path = target(self._base_path, call)
        return h11.Request(method=call.method, target=path, headers=headers), body

    def _unreachable(self, message: str, *, sent: bool = True) -> BrokerUnreachable:
        return BrokerUnreachable(self.server, message.format(server=self.server), sent=sent)

    async def aclose(self) -> None:
        idle, self._idle = self._idle, []
        for connection in idle:
            await connection.aclose()


def open_async_client(
    server: str,
    token: str | None,
    *,
    timeout: float = 10.0,
    max_connections: int = 4,
    user_agent: str = "jobd-client",
) -> AsyncFailoverClient:
    """A client of each broker `server` names (several, comma-separated, asked in turn:
    failover.py): this one for a plain http:// broker; the wire's httpx `AsyncClient` for
    an https:// one, a Unix socket, or behind a proxy the environment names."""

    opening = connect_timeout(server, timeout)

    def connect(url: str) -> PlainAsyncClient | AsyncClientType:
        if plain_http_serves(url):
            return PlainAsyncClient(
                url,
                token,
                timeout=timeout,
                max_connections=max_connections,
                user_agent=user_agent,
                connect_timeout=opening,
            )
        import httpx

        from jobd.wire.client import AsyncClient

        limits = httpx.Limits(
            max_connections=max_connections, max_keepalive_connections=max_connections
        )
        timeouts = httpx.Timeout(timeout, connect=opening)
        return AsyncClient(url, token, timeout=timeouts, limits=limits, user_agent=user_agent)

    return AsyncFailoverClient(server, connect)


def _reason(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__
