"""Bounds on the broker's TCP connections, so idle ones cannot take it down.

uvicorn reads a request head for as long as a client takes: a connection that sends
nothing (or one byte a minute) holds a descriptor for ever, since its keep-alive timer
is armed only after a response. Twenty thousand of them ran the broker out of
descriptors and `/healthz` answered nothing. Neither h11 nor httptools has a timeout of
its own (they parse what they are given), and uvicorn's `limit_concurrency` answers 503
only once a request has been read; so the bound sits in the protocol, the one place that
sees a connection from its first byte: a subclass of uvicorn's httptools protocol.

- **A head within `head_timeout_s`.** A connection is given a deadline when it is made,
  and again when the first byte of a next request arrives on a kept-alive one; the
  request's head complete takes it away. A sweep (every quarter of the timeout, at most
  a second apart) closes the connections past their deadline. Deadlines are kept in a
  dict in the order given, so the sweep stops at the first one not yet due, and a
  request costs a dict insert and pop (a timer armed and cancelled per request cost
  about 5 µs under load).
- **At most `per_client` connections from one address** (0: no cap). One more is
  answered 503 and closed. Loopback is not capped: what comes from it is this host's own
  (the worker and the CLI of `jobd dev`, a TLS proxy in front of the broker, `jobd
  bench`'s fleet of a thousand simulated workers), and a flood from it is still bounded
  by the head timeout and the reserve.
- **Descriptors kept in reserve.** At most `total` connections are open (the daemon
  sets it below RLIMIT_NOFILE, keeping the rest for the store, the logs and new
  arrivals). One more closes the connection that has waited longest for its head (a
  flood's, never a request in progress), so `/healthz` and a worker's report still get
  in; with none waiting, the newcomer is answered 503 and closed.

Each refusal is counted in `jobd_connections_refused_total{reason}` and logged
(`connections_refused`, at most once per reason every 10 s, with the count since).

The same protocol serves the broker's Unix socket. There a connection reads its peer's
credentials from the kernel once (`SO_PEERCRED`: pid, uid, gid, as they were at
connect), and puts them in every request's scope under `PEER`, a key no header can
set: the auth middleware (broker/auth/middleware.py) knows the caller by them. A Unix
connection has no address, so it is never capped per client.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import ipaddress
import socket
import struct
import time
from dataclasses import dataclass
from typing import Any, ClassVar

from prometheus_client import CollectorRegistry, Counter
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from jobd.logconfig import get_logger

__all__ = ["PEER", "ConnectionGuard", "ConnectionLimits", "Peer", "guarded_protocol", "peer_of"]

PEER = "jobd.peer"  # the scope's key of a Unix socket peer's credentials
_CREDENTIALS = struct.Struct("3i")  # struct ucred: pid, uid, gid

LOG_EVERY_S = 10.0
_REFUSAL = (
    b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\n"
    b"Content-Type: text/plain\r\nContent-Length: %d\r\n\r\n%s"
)


@dataclass(frozen=True)
class ConnectionLimits:
    head_timeout_s: float = 10.0
    per_client: int = 512  # 0: no cap
    total: int = 1 << 20


class ConnectionGuard:
    """The connections open, by client address, and those still waiting for a head."""

    def __init__(self, limits: ConnectionLimits, registry: CollectorRegistry) -> None:
        self.limits = limits
        self.open = 0
        self.by_client: collections.Counter[str] = collections.Counter()
        self.waiting: dict[GuardedProtocol, float] = {}  # head deadlines, oldest first
        self._sweep: asyncio.TimerHandle | None = None
        self.refused = Counter(
            "jobd_connections_refused",
            "TCP connections the broker closed or refused unserved, by reason: "
            "head_timeout, per_client, reserve (the oldest waiting one, to admit a "
            "newer), full.",
            ["reason"],
            registry=registry,
        )
        self._unlogged: collections.Counter[str] = collections.Counter()
        self._logged_at: dict[str, float] = {}

    def admit(self, conn: GuardedProtocol) -> bool:
        """Count conn in, or refuse it (closed, said): whether it may be served."""
        client = conn.client_host
        limit = self.limits.per_client
        if client is not None and limit and self.by_client[client] >= limit:
            self.refuse(conn, "per_client", b"jobd: too many connections from this address\n")
            return False
        if self.open >= self.limits.total and not self._evict_oldest():
            self.refuse(conn, "full", b"jobd: too many connections\n")
            return False
        self.open += 1
        if client is not None:
            self.by_client[client] += 1
        return True

    def release(self, conn: GuardedProtocol) -> None:
        self.open -= 1
        client = conn.client_host
        if client is not None:
            self.by_client[client] -= 1
            if not self.by_client[client]:
                del self.by_client[client]

    def await_head(self, conn: GuardedProtocol) -> None:
        """conn must complete a request head within the timeout (no-op if it already must)."""
        if conn not in self.waiting:
            self.waiting[conn] = time.monotonic() + self.limits.head_timeout_s
            if self._sweep is None:
                self._sweep = conn.loop.call_later(self._sweep_every(), self._close_late, conn.loop)

    def head_arrived(self, conn: GuardedProtocol) -> None:
        self.waiting.pop(conn, None)

    def _sweep_every(self) -> float:
        return min(1.0, self.limits.head_timeout_s / 4)

    def _close_late(self, loop: asyncio.AbstractEventLoop) -> None:
        now = time.monotonic()
        while self.waiting:
            conn, deadline = next(iter(self.waiting.items()))
            if deadline > now:
                break
            if conn.transport.is_closing():  # closed meanwhile: not a refusal
                self.waiting.pop(conn)
                continue
            self.refuse(conn, "head_timeout")
        self._sweep = None
        if self.waiting:
            self._sweep = loop.call_later(self._sweep_every(), self._close_late, loop)

    def _evict_oldest(self) -> bool:
        if not self.waiting:
            return False
        oldest = next(iter(self.waiting))
        self.refuse(oldest, "reserve")
        return True

    def refuse(self, conn: GuardedProtocol, reason: str, answer: bytes = b"") -> None:
        """Close conn unserved (answering 503 when there is something to say), counted."""
        self.waiting.pop(conn, None)
        if answer:
            conn.transport.write(_REFUSAL % (len(answer), answer))
        conn.transport.close()
        self.refused.labels(reason).inc()
        self._say(reason, conn.client[0] if conn.client else None)

    def _say(self, reason: str, client: str | None) -> None:
        self._unlogged[reason] += 1
        now = time.monotonic()
        if now - self._logged_at.get(reason, -LOG_EVERY_S) < LOG_EVERY_S:
            return
        self._logged_at[reason] = now
        count = self._unlogged.pop(reason)
        get_logger().warning("connections_refused", reason=reason, count=count, client=client)


@dataclass(frozen=True)
class Peer:
    """Who is at the other end of a Unix socket, as the kernel says."""

    pid: int
    uid: int
    gid: int


def peer_of(transport: asyncio.BaseTransport) -> Peer | None:
    """The peer's credentials of a Unix socket connection; None for any other."""
    sock = transport.get_extra_info("socket")
    if sock is None or sock.family != socket.AF_UNIX:
        return None
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _CREDENTIALS.size)
    return Peer(*_CREDENTIALS.unpack(raw))


class GuardedProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, admitted by the guard and given a head deadline."""

    guard: ClassVar[ConnectionGuard]
    _admitted = False
    _peer: Peer | None = None

    @property
    def client_host(self) -> str | None:
        """The address counted against the per-client cap; None for loopback."""
        return _capped(self.client[0]) if self.client else None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._peer = peer_of(transport)
        self._admitted = self.guard.admit(self)
        if self._admitted:
            self.guard.await_head(self)

    def data_received(self, data: bytes) -> None:
        if self.timeout_keep_alive_task is not None:  # kept alive: a next head begins
            self.guard.await_head(self)
        super().data_received(data)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._peer is not None:
            self.scope[PEER] = self._peer  # type: ignore[literal-required]

    def on_headers_complete(self) -> None:
        self.guard.head_arrived(self)
        super().on_headers_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self.guard.head_arrived(self)
        if self._admitted:
            self._admitted = False
            self.guard.release(self)
        super().connection_lost(exc)


@functools.lru_cache(maxsize=4096)
def _capped(host: str) -> str | None:
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped  # ::ffff:127.0.0.1 is loopback too
    return None if address.is_loopback else host


def guarded_protocol(limits: ConnectionLimits, registry: CollectorRegistry) -> type[Any]:
    """The protocol class to give uvicorn (`Config(http=...)`), bound to its own guard."""
    guard = ConnectionGuard(limits, registry)
    return type("JobdHttpProtocol", (GuardedProtocol,), {"guard": guard})
