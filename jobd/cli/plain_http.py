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
import json
import os
import select
import socket
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar, cast
from urllib.parse import quote, urlencode, urlsplit

from jobd.discovery import usable_token
from jobd.wire.errors import ApiError, BrokerUnreachable, error_message

if TYPE_CHECKING:
    import httpx

    from jobd.wire.calls import Call

__all__ = ["HOLD_MARGIN_S", "PlainClient", "Reply", "plain_http_serves"]

T = TypeVar("T")
# As the wire's client: a held request's socket outlasts the broker's hold by this much
# (a test holds the two equal).
HOLD_MARGIN_S = 10.0
_PROXY_VARIABLES = ("http_proxy", "all_proxy")
# What httpx leaves unescaped in a path (RFC 3986's pchar); anything else is %-escaped.
_PATH_SAFE = "/:@!$&'()*+,;=-._~%"


def plain_http_serves(server: str) -> bool:
    """Whether this client can reach `server`: http://, and no proxy said in the
    environment (httpx honours those; this client does not)."""
    if urlsplit(server).scheme != "http":
        return False
    names = {name.lower() for name in os.environ}
    return not names & set(_PROXY_VARIABLES)


class Reply:
    """A response read whole: what the wire's parsers read of an httpx.Response."""

    def __init__(self, status: int, reason: str, headers: http.client.HTTPMessage, body: bytes):
        self.status_code = status
        self.reason_phrase = reason
        self.headers = headers  # case-insensitive .get(), as httpx's Headers
        self.content = body

    @property
    def is_error(self) -> bool:
        return self.status_code >= 400

    def json(self) -> Any:
        return json.loads(self.content)


class PlainClient:
    """Sends calls to one http:// broker over a kept-alive connection; use it as a context
    manager or close()."""

    def __init__(
        self,
        server: str,
        token: str | None,
        *,
        timeout: float = 15.0,
        user_agent: str = "jobd-client",
    ) -> None:
        self.server = server.rstrip("/")
        parts = urlsplit(self.server)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"the broker address {self.server!r} must start with http://")
        self._base_path = parts.path.rstrip("/")
        self.headers = {"User-Agent": user_agent, "Accept": "*/*"}
        token = usable_token(token, "the token given")  # TokenError (a ValueError), never sent
        if token:
            self.headers["Authorization"] = f"Bearer {token}"
        self.timeout = timeout
        self._connection = _Connection(parts.hostname, parts.port or 80, timeout=timeout)

    def run(self, call: Call[T]) -> T:
        """Send the call; its answer's value, or ApiError / BrokerUnreachable."""
        reply = self._send(call)
        if reply.is_error:
            raise ApiError(reply.status_code, error_message(reply))
        return call.parse(cast("httpx.Response", reply))

    def _send(self, call: Call[Any]) -> Reply:
        body, headers = _body(call)
        timeout = (
            self.timeout if call.hold is None else max(self.timeout, call.hold + HOLD_MARGIN_S)
        )
        self._connect(timeout)
        try:
            self._connection.request(
                call.method, self._target(call), body, {**self.headers, **headers}
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
        try:
            connection.connect()
        except OSError:  # refused, no such host, or no answer in time
            connection.close()
            said = "cannot reach the jobd broker at {server} (is `jobd dev` running?)"
            raise self._unreachable(said) from None

    def _target(self, call: Call[Any]) -> str:
        path = quote(self._base_path + call.url, safe=_PATH_SAFE)
        return f"{path}?{_query(call.params)}" if call.params else path

    def _unreachable(self, message: str) -> BrokerUnreachable:
        return BrokerUnreachable(self.server, message.format(server=self.server))

    def close(self) -> None:
        self._connection.close()

    def __enter__(self) -> PlainClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class _Connection(http.client.HTTPConnection):
    """http.client's connection, an ASCII host name resolved as the bytes it is: `socket`
    encodes a str one with the `idna` codec, whose tables (stringprep, unicodedata) cost
    every `job` command ~6 M instructions to load, to make the same bytes (and a name no
    label rule allows then fails as an unreachable broker, not with a UnicodeError)."""

    def __init__(self, host: str, port: int, timeout: float) -> None:
        super().__init__(host, port, timeout=timeout)
        self._create_connection = _create_connection


def _create_connection(address: tuple[str, int], *args: Any) -> socket.socket:
    host, port = address
    name = cast(str, host.encode()) if host.isascii() else host  # getaddrinfo takes bytes
    return socket.create_connection((name, port), *args)


def _body(call: Call[Any]) -> tuple[bytes | None, dict[str, str]]:
    """The request's body and the headers that go with it, as httpx encodes them."""
    headers = dict(call.headers)
    if call.content is not None:
        return call.content, headers
    if call.json is not None:
        encoded = json.dumps(call.json, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        return encoded.encode(), {"Content-Type": "application/json", **headers}
    return None, headers


def _query(params: Any) -> str:
    """Query parameters as httpx writes them: a list repeats its key, booleans are
    `true`/`false`, None is empty."""
    pairs = []
    for key, value in params.items():
        for item in value if isinstance(value, list | tuple) else [value]:
            pairs.append((key, _primitive(item)))
    return urlencode(pairs)


def _primitive(value: Any) -> str:
    if value is True or value is False:
        return "true" if value else "false"
    return "" if value is None else str(value)


def _reason(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__
