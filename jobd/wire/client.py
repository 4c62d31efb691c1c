"""The HTTP clients of the broker's API, in the shape of httpx's own.

`BaseClient` holds what both share: the broker's address, the bearer token and user
agent, how a `Call` becomes a request (a held call's read timeout outlasts the broker's
hold), and how an answer becomes a value or one of two exceptions with a one-sentence
message: `ApiError` when the broker refused, `BrokerUnreachable` when it could not be
reached. `Client` sends calls synchronously (the CLI), `AsyncClient` asynchronously (the
worker, whose retries and batching sit on top, in `jobd.worker.reporting`), each to one
broker; `open_brokers` and `open_brokers_async` give one per broker of a comma-separated
list, asked in turn (`failover.py`: the SDK's clients).
"""

from __future__ import annotations

from typing import Any, TypeVar
from urllib.parse import urlsplit

import httpx

from jobd.discovery import usable_token
from jobd.wire import protocol
from jobd.wire.calls import Call
from jobd.wire.closing import AsyncClosing, Closing
from jobd.wire.errors import ApiError, BrokerUnreachable, error_message, redirected
from jobd.wire.failover import AsyncFailoverClient, FailoverClient, connect_timeout
from jobd.wire.plain_http import HOLD_MARGIN_S, UNIX_HOST, unix_socket_path
from jobd.wire.protocol import PROTOCOL_HEADER

__all__ = [
    "HOLD_MARGIN_S",
    "ApiError",
    "AsyncClient",
    "BaseClient",
    "BrokerUnreachable",
    "Client",
    "error_message",
    "open_brokers",
    "open_brokers_async",
]

T = TypeVar("T")


class BaseClient:
    """How calls become requests and answers become values or errors; no I/O."""

    def __init__(
        self,
        server: str,
        token: str | None,
        *,
        timeout: float | httpx.Timeout,
        user_agent: str = "jobd-client",
    ) -> None:
        self.server = server.rstrip("/")
        # A broker's Unix socket (unix:///PATH) knows the caller by its uid: no token is
        # sent there, and requests name a host of no meaning.
        self.socket_path = unix_socket_path(self.server)
        self.base_url = f"http://{UNIX_HOST}" if self.socket_path else self.server
        if self.socket_path is None and urlsplit(self.server).scheme not in ("http", "https"):
            raise ValueError(
                f"the broker address {self.server!r} must start with http(s):// or unix://"
            )
        self.headers = {"User-Agent": user_agent, PROTOCOL_HEADER: str(protocol.PROTOCOL)}
        token = usable_token(token, "the token given")  # TokenError (a ValueError), never sent
        if token and self.socket_path is None:
            self.headers["Authorization"] = f"Bearer {token}"
        self.timeout = httpx.Timeout(timeout)
        # Plain http has no TLS, so no CA bundle to load: httpx loads it for every client
        # it makes unless told not to, some 25 ms of each `job` command (calls go only to
        # paths under `server`, so nothing else is ever fetched with this setting).
        self.verify = urlsplit(self.server).scheme == "https"

    def _request(self, call: Call[Any]) -> dict[str, Any]:
        """The keyword arguments of httpx's `request()` for this call."""
        args: dict[str, Any] = {"method": call.method, "url": call.url}
        if call.params is not None:
            args["params"] = call.params
        if call.content is not None:
            args["content"] = call.content
        elif call.json is not None:
            args["json"] = call.json
        if call.headers:
            args["headers"] = call.headers
        if call.hold is not None:
            base = self.timeout
            read = call.hold + HOLD_MARGIN_S
            args["timeout"] = httpx.Timeout(
                connect=base.connect, read=read, write=base.write, pool=base.pool
            )
        return args

    def _answer(self, call: Call[T], response: httpx.Response) -> T:
        if response.is_error:
            raise ApiError(response.status_code, error_message(response))
        moved = redirected(self.server, response)
        if moved is not None:  # a standby's: failover.py sends the call on
            raise moved
        return call.parse(response)

    def _unreachable(self, exc: httpx.TransportError) -> BrokerUnreachable:
        unsent = httpx.ConnectError | httpx.ConnectTimeout | httpx.UnsupportedProtocol
        if isinstance(exc, unsent):
            message = f"cannot reach the jobd broker at {self.server} (is `jobd dev` running?)"
            return BrokerUnreachable(self.server, message, sent=False)
        if isinstance(exc, httpx.PoolTimeout):  # waited for a connection: nothing went out
            message = f"the jobd broker at {self.server} did not answer in time"
            return BrokerUnreachable(self.server, message, sent=False)
        if isinstance(exc, httpx.TimeoutException):
            message = f"the jobd broker at {self.server} did not answer in time"
        else:
            message = f"lost the connection to the jobd broker at {self.server} ({exc})"
        return BrokerUnreachable(self.server, message)


class Client(BaseClient, Closing):
    """Sends calls and waits for their answers; use it as a context manager or close()."""

    def __init__(
        self,
        server: str,
        token: str | None,
        *,
        timeout: float | httpx.Timeout = 15.0,
        transport: httpx.BaseTransport | None = None,
        user_agent: str = "jobd-client",
    ) -> None:
        super().__init__(server, token, timeout=timeout, user_agent=user_agent)
        if transport is None and self.socket_path is not None:
            transport = httpx.HTTPTransport(uds=self.socket_path)
        self._http = httpx.Client(
            base_url=self.base_url,
            headers=self.headers,
            timeout=self.timeout,
            verify=self.verify,
            transport=transport,
        )

    def run(self, call: Call[T]) -> T:
        """Send the call; its answer's value, or ApiError / BrokerUnreachable."""
        try:
            response = self._http.request(**self._request(call))
        except httpx.TransportError as exc:
            raise self._unreachable(exc) from None
        return self._answer(call, response)

    def close(self) -> None:
        self._http.close()


class AsyncClient(BaseClient, AsyncClosing):
    """Sends calls concurrently; use it as an async context manager or aclose()."""

    def __init__(
        self,
        server: str,
        token: str | None,
        *,
        timeout: float | httpx.Timeout = 10.0,
        limits: httpx.Limits | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        user_agent: str = "jobd-client",
    ) -> None:
        super().__init__(server, token, timeout=timeout, user_agent=user_agent)
        limits = limits or httpx.Limits()
        if transport is None and self.socket_path is not None:
            transport = httpx.AsyncHTTPTransport(uds=self.socket_path, limits=limits)
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            headers=self.headers,
            timeout=self.timeout,
            verify=self.verify,
            limits=limits,
            transport=transport,
        )

    async def run(self, call: Call[T]) -> T:
        """Send the call; its answer's value, or ApiError / BrokerUnreachable."""
        try:
            response = await self._http.request(**self._request(call))
        except httpx.TransportError as exc:
            raise self._unreachable(exc) from None
        return self._answer(call, response)

    async def aclose(self) -> None:
        await self._http.aclose()


def open_brokers(
    servers: str, token: str | None, *, timeout: float = 15.0, user_agent: str = "jobd-client"
) -> FailoverClient:
    """A `Client` for each broker `servers` names, asked in turn (failover.py)."""

    timeouts = httpx.Timeout(timeout, connect=connect_timeout(servers, timeout))

    def connect(url: str) -> Client:
        return Client(url, token, timeout=timeouts, user_agent=user_agent)

    return FailoverClient(servers, connect)


def open_brokers_async(
    servers: str, token: str | None, *, timeout: float = 10.0, user_agent: str = "jobd-client"
) -> AsyncFailoverClient:
    """An `AsyncClient` for each broker `servers` names, asked in turn (failover.py)."""

    timeouts = httpx.Timeout(timeout, connect=connect_timeout(servers, timeout))

    def connect(url: str) -> AsyncClient:
        return AsyncClient(url, token, timeout=timeouts, user_agent=user_agent)

    return AsyncFailoverClient(servers, connect)
