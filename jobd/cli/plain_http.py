"""The `job` command's HTTP client for a broker at an http:// address: the standard library's.

httpx and httpcore cost a `job` command some 45 ms of CPU to import and set up — more than
a third of `job get` once its table no longer went through rich — for one or two requests
over plain HTTP/1.1. `http.client`, which Python loads in a tenth of that, sends the same
`Call`s here: the same requests (path, query, JSON body, headers), answers read by the
same parsers (`.json()`, `.content`, `.headers`), the same one-sentence errors, one
connection kept alive across a command's calls. An https:// broker (certificates, TLS
settings), a proxy in the environment, or an httpx transport handed in (the tests' fake
brokers) go through the wire's httpx `Client` as before (`broker_client.JobdClient`
chooses). Next stage: the broker's routes.
"""

from __future__ import annotations

import http.client
import select
import socket
from typing import TYPE_CHECKING, Any, TypeVar, cast
from urllib.parse import urlsplit

from jobd.discovery import usable_token
from jobd.wire import protocol
from jobd.wire.closing import Closing
from jobd.wire.errors import ApiError, BrokerUnreachable, error_message, redirected
from jobd.wire.plain_http import (
    HOLD_MARGIN_S,
    UNIX_HOST,
    Reply,
    plain_http_serves,
    request_body,
    target,
    unix_socket_path,
)
from jobd.wire.protocol import PROTOCOL_HEADER

if TYPE_CHECKING:
    import httpx

    from jobd.wire.calls import Call

__all__ = ["HOLD_MARGIN_S", "PlainClient", "Reply", "plain_http_serves"]

T = TypeVar("T")


class PlainClient(Closing):
    """Sends calls to one http:// broker over a kept-alive connection; use it as a context
    manager or close()."""

    def __init__(
        self,
        server: str,
        token: str | None,
        *,
        timeout: float = 15.0,
        connect_timeout: float | None = None,
        user_agent: str = "jobd-client",
    ) -> None:
        self.server = server.rstrip("/")
        socket_path = unix_socket_path(self.server)
        parts = urlsplit(self.server)
        if socket_path is None and (parts.scheme != "http" or not parts.hostname):
            raise ValueError(
                f"the broker address {self.server!r} must start with http:// or unix://"
            )
        self._base_path = "" if socket_path else parts.path.rstrip("/")
        self.headers = {
            "User-Agent": user_agent,
            "Accept": "*/*",
            PROTOCOL_HEADER: str(protocol.PROTOCOL),
        }
        token = usable_token(token, "the token given")  # TokenError (a ValueError), never sent
        if token and socket_path is None:  # the socket knows the caller by its uid
            self.headers["Authorization"] = f"Bearer {token}"
        self.timeout = timeout
        self.connect_timeout = timeout if connect_timeout is None else connect_timeout
        self._connection: http.client.HTTPConnection
        if socket_path is not None:
            self._connection = _UnixConnection(socket_path, timeout=timeout)
        else:
            assert parts.hostname is not None
            self._connection = _Connection(parts.hostname, parts.port or 80, timeout=timeout)

    def run(self, call: Call[T]) -> T:
        """Send the call; its answer's value, or ApiError / BrokerUnreachable."""
        reply = self._send(call)
        if reply.is_error:
            raise ApiError(reply.status_code, error_message(reply))
        moved = redirected(self.server, reply)
        if moved is not None:  # a standby's: failover.py sends the call on
            raise moved
        return call.parse(cast("httpx.Response", reply))

    def _send(self, call: Call[Any]) -> Reply:
        body, headers = request_body(call)
        timeout = (
            self.timeout if call.hold is None else max(self.timeout, call.hold + HOLD_MARGIN_S)
        )
        self._connect(timeout)
        try:
            self._connection.request(
                call.method, target(self._base_path, call), body, {**self.headers, **headers}
            )
            answer = self._connection.getresponse()
            return Reply(answer.status, answer.reason, answer.headers, answer.read())
        except TimeoutError:
            self._connection.close()
            raise self._unreachable("the jobd broker at {server} did not answer in time") from None
        except (OSError, http.client.HTTPException) as exc:
            self._connection.close()
            said = f"lost the connection to the jobd broker at {{server}} ({_reason(exc)})"
            raise self._unreachable(said) from None

    def _connect(self, timeout: float) -> None:
        """Open the connection, or check the open one is still there: a kept-alive
        connection the broker closed meanwhile reads as ready (its end), and is replaced
        before anything is sent on it, as httpcore does."""
        connection = self._connection
        connection.timeout = timeout
        if connection.sock is not None:
            if not select.select([connection.sock], [], [], 0)[0]:
                connection.sock.settimeout(timeout)
                return
            connection.close()
        connection.timeout = min(timeout, self.connect_timeout)
        try:
            connection.connect()
            assert connection.sock is not None
            connection.sock.settimeout(timeout)
            connection.timeout = timeout
        except OSError:  # refused, no such host, or no answer in time
            connection.close()
            said = "cannot reach the jobd broker at {server} (is `jobd dev` running?)"
            if isinstance(connection, _UnixConnection):
                said = "cannot reach the jobd broker at {server} (is `jobd broker` running?)"
            raise self._unreachable(said, sent=False) from None

    def _unreachable(self, message: str, *, sent: bool = True) -> BrokerUnreachable:
        return BrokerUnreachable(self.server, message.format(server=self.server), sent=sent)

    def close(self) -> None:
        self._connection.close()


class _Connection(http.client.HTTPConnection):
    """http.client's connection, an ASCII host name resolved as the bytes it is: `socket`
    encodes a str one with the `idna` codec, whose tables (stringprep, unicodedata) cost
    every `job` command ~6 M instructions to load, to make the same bytes (and a name no
    label rule allows then fails as an unreachable broker, not with a UnicodeError)."""

    def __init__(self, host: str, port: int, timeout: float) -> None:
        super().__init__(host, port, timeout=timeout)
        self._create_connection = _create_connection


class _UnixConnection(http.client.HTTPConnection):
    """http.client's connection over a broker's Unix socket (`unix:///PATH`)."""

    def __init__(self, path: str, timeout: float) -> None:
        super().__init__(UNIX_HOST, timeout=timeout)
        self.socket_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self.socket_path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


def _create_connection(address: tuple[str, int], *args: Any) -> socket.socket:
    host, port = address
    name = cast(str, host.encode()) if host.isascii() else host  # getaddrinfo takes bytes
    return socket.create_connection((name, port), *args)


def _reason(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__
