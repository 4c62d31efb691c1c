"""What the two plain HTTP/1.1 clients share: which brokers they serve, each call's
request target and body as httpx writes them, and the answer read whole.

The `job` command's client (`jobd.cli.plain_http`, the standard library's http.client)
and the agent's (`jobd.wire.plain_async`, h11 on anyio) both stand in for httpx where the
broker is plain http:// and no proxy is said; what they send must be what httpx sends
(tests/unit/test_plain_http_requests_read_as_httpx_ones.py), and their answers are read
by the calls' own parsers, which read an httpx.Response. Standard library only.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode, urlsplit

if TYPE_CHECKING:
    from jobd.wire.calls import Call

__all__ = [
    "HOLD_MARGIN_S",
    "UNIX_HOST",
    "Reply",
    "plain_http_serves",
    "request_body",
    "target",
    "unix_socket_path",
]

# A held request's socket outlasts the broker's hold by this much (the wire's httpx
# client says the same; a test holds them equal).
HOLD_MARGIN_S = 10.0
_PROXY_VARIABLES = ("http_proxy", "all_proxy")
# What httpx leaves unescaped in a path (RFC 3986's pchar); anything else is %-escaped.
_PATH_SAFE = "/:@!$&'()*+,;=-._~%"


UNIX_HOST = "localhost"  # the Host a request over a Unix socket names (it has no host)


def unix_socket_path(server: str) -> str | None:
    """The socket's path of a `unix:///PATH` broker address; None for any other address.
    ValueError for a unix: address of no absolute path."""
    if not server.startswith("unix:"):
        return None
    parts = urlsplit(server)
    if parts.netloc or not parts.path.startswith("/"):
        raise ValueError(
            f"the broker address {server!r} must be unix:///PATH (an absolute path after three "
            "slashes)"
        )
    return parts.path


def plain_http_serves(server: str) -> bool:
    """Whether a plain client can reach `server`: http://, and no proxy said in the
    environment (httpx honours those; the plain clients do not)."""
    if urlsplit(server).scheme != "http":
        return False
    names = {name.lower() for name in os.environ}
    return not names & set(_PROXY_VARIABLES)


class Reply:
    """An answer read whole: what the wire's parsers read of an httpx.Response."""

    def __init__(self, status: int, reason: str, headers: Any, body: bytes) -> None:
        # headers: anything with a case-insensitive .get(name), as httpx's Headers
        # (http.client's HTTPMessage, or the agent's lookup of h11's header list)
        self.status_code = status
        self.reason_phrase = reason
        self.headers = headers
        self.content = body

    @property
    def is_error(self) -> bool:
        return self.status_code >= 400

    def json(self) -> Any:
        return json.loads(self.content)


def target(base_path: str, call: Call[Any]) -> str:
    """The request target: the broker's path prefix and the call's, %-escaped as httpx
    escapes them, and its query."""
    path = quote(base_path + call.url, safe=_PATH_SAFE)
    return f"{path}?{_query(call.params)}" if call.params else path


def request_body(call: Call[Any]) -> tuple[bytes | None, dict[str, str]]:
    """The request's body and the headers that go with it, as httpx encodes them."""
    headers = dict(call.headers)
    if call.content is not None:
        return call.content, headers
    if call.json is not None:
        encoded = json.dumps(call.json, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        return encoded.encode(), {"Content-Type": "application/json", **headers}
    return None, headers


def _query(params: Mapping[str, Any]) -> str:
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
