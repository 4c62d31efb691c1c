"""Several brokers behind one client: which to ask first, when to ask the next, and a
standby's 307 followed once.

`JOBD_URL`, `--server` and a context's server may name several brokers, comma-separated
(`http://a:8765,http://b:8765`, `unix:///PATH` among them): one leader and its standbys
(docs/operations.md). Every client asks the broker that answered last first, then the
others in the order given. It asks the next one when a broker cannot be reached — for a
read always, for a write only when nothing was sent (a write cut off after it went out
may have been applied: its caller decides, and the agent's reports are made safe to send
again) — and when a broker answers 503 (no leader known, or its store away: nothing was
applied). A standby answers a write 307 with the leader's URL (`X-Jobd-Leader`, and the
request's whole URL in `Location`): the client sends the same call there, once, and
prefers that broker from then on. A broker that failed is no longer preferred, so a
paused one is not asked first again and again.

`Brokers` is that choice, without I/O; `FailoverClient` and `AsyncFailoverClient` send
calls through one client per broker (the CLI's standard-library one, httpx's, the agent's
h11 one), made on first use, so a single URL costs what it cost before. Standard library
only: the `job` command loads it. Next stage: the broker's routes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar
from urllib.parse import urlsplit

from jobd.wire.closing import AsyncClosing, Closing
from jobd.wire.errors import ApiError, BrokerUnreachable, Redirected

if TYPE_CHECKING:
    from jobd.wire.calls import Call

__all__ = [
    "FAILOVER_CONNECT_S",
    "AsyncFailoverClient",
    "Brokers",
    "FailoverClient",
    "connect_timeout",
    "leader_url",
    "split_servers",
]

T = TypeVar("T")
# With several brokers, how long a connection may take to open before the next broker is
# asked: a host that is down drops the connection's packets, and would otherwise cost
# every command the whole timeout (15 s) before it reached a broker that is up.
FAILOVER_CONNECT_S = 3.0
_SCHEMES = ("http://", "https://", "unix:")
_READS = frozenset({"GET", "HEAD"})  # asked again of the next broker whatever happened


def split_servers(servers: str) -> list[str]:
    """The brokers of a comma-separated list, in order; ValueError naming the list when
    it names none, or one that is no broker address."""
    urls = [part.strip().rstrip("/") for part in servers.split(",") if part.strip()]
    if not urls:
        raise ValueError(f"the broker address {servers!r} names no broker")
    for url in urls:
        if not url.startswith(_SCHEMES):
            raise ValueError(
                f"the broker address {url!r} must start with http://, https:// or unix://"
            )
    return urls


def connect_timeout(servers: str, timeout: float) -> float:
    """How long one broker of `servers` may take to accept a connection."""
    several = len([url for url in servers.split(",") if url.strip()]) > 1
    return min(timeout, FAILOVER_CONNECT_S) if several else timeout


class Brokers:
    """The brokers a client may ask, and the one it asks first: the last that answered."""

    def __init__(self, servers: str) -> None:
        self.urls = split_servers(servers)
        self.preferred = self.urls[0]

    def order(self) -> list[str]:
        """The preferred broker, then the others in the order given."""
        return [self.preferred, *(url for url in self.urls if url != self.preferred)]

    def answered(self, url: str) -> None:
        """`url` answered: ask it first from now on (a leader named by a 307 joins the list)."""
        if url not in self.urls:
            self.urls.append(url)
        self.preferred = url

    def failed(self, url: str) -> None:
        """`url` could not take a call: the next one is asked first from now on."""
        if url == self.preferred:
            self.preferred = self.urls[(self.urls.index(url) + 1) % len(self.urls)]

    def pass_over(self, url: str, exc: Exception, call: Call[Any]) -> Exception:
        """`exc` of the broker at `url`, to be raised now when it does not let the call go
        to the next broker; else the broker is marked failed and `exc` returned."""
        if not self.try_next(exc, call):
            raise exc
        self.failed(url)
        return exc

    def try_next(self, exc: Exception, call: Call[Any]) -> bool:
        """Whether `exc` from one broker lets the call go to the next one."""
        if isinstance(exc, BrokerUnreachable):
            return not exc.sent or call.method in _READS
        return isinstance(exc, ApiError) and exc.status == 503

    def all_failed(self, failures: Sequence[Exception]) -> Exception:
        """What to raise when no broker could take the call: the one failure as it was
        when there is one broker; a 503 over unreachable ones; else every broker's reason."""
        if len(failures) == 1:
            return failures[0]
        refusals = [f for f in failures if isinstance(f, ApiError)]
        if refusals:
            return refusals[-1]
        said = "; ".join(str(f) for f in failures)
        servers = ",".join(self.urls)
        return BrokerUnreachable(servers, f"no jobd broker of {servers} answered: {said}")


def leader_url(moved: Redirected, call: Call[Any]) -> str:
    """The leader's base URL a 307 names: `X-Jobd-Leader`, else `Location` less the
    call's own path and query. ApiError 503 when it names no usable broker."""
    leader = moved.leader
    if not leader and moved.location:
        parts = urlsplit(moved.location)
        base = parts.path.removesuffix(call.url) if parts.path.endswith(call.url) else ""
        leader = f"{parts.scheme}://{parts.netloc}{base}"
    if not leader or not leader.startswith(("http://", "https://")):
        raise ApiError(503, f"{moved}, which is no broker address")
    return leader.rstrip("/")


class _Sender(Protocol):
    def run(self, call: Call[T]) -> T: ...

    def close(self) -> None: ...


class _AsyncSender(Protocol):
    async def run(self, call: Call[T]) -> T: ...

    async def aclose(self) -> None: ...


S = TypeVar("S")


class _Clients(Generic[S]):
    """One client per broker, made the first time that broker is asked."""

    def __init__(self, servers: str, connect: Callable[[str], S]) -> None:
        self.brokers = Brokers(servers)
        self._connect = connect
        self._clients: dict[str, S] = {}

    @property
    def server(self) -> str:
        """The broker asked first: the last that answered."""
        return self.brokers.preferred

    def client(self, url: str) -> S:
        client = self._clients.get(url)
        if client is None:
            client = self._clients[url] = self._connect(url)
        return client

    def made(self) -> list[S]:
        clients, self._clients = list(self._clients.values()), {}
        return clients


class FailoverClient(_Clients[_Sender], Closing):
    """Sends each call to the brokers of `servers` in turn until one answers; use it as
    a context manager or close()."""

    def run(self, call: Call[T]) -> T:
        """The first answer's value; ApiError / BrokerUnreachable when none could take it."""
        failures: list[Exception] = []
        for url in self.brokers.order():
            try:
                return self._run_at(url, call)
            except (ApiError, BrokerUnreachable) as exc:
                failures.append(self.brokers.pass_over(url, exc, call))
        raise self.brokers.all_failed(failures)

    def _run_at(self, url: str, call: Call[T]) -> T:
        try:
            value = self.client(url).run(call)
        except Redirected as moved:
            url = leader_url(moved, call)
            try:
                value = self.client(url).run(call)
            except Redirected as again:  # one hop only: the brokers disagree on the leader
                raise ApiError(503, f"{moved}, and {again}") from None
        self.brokers.answered(url)
        return value

    def close(self) -> None:
        for client in self.made():
            client.close()


class AsyncFailoverClient(_Clients[_AsyncSender], AsyncClosing):
    """`FailoverClient` for async code: the agent's and the SDK's AsyncClient."""

    async def run(self, call: Call[T]) -> T:
        """The first answer's value; ApiError / BrokerUnreachable when none could take it."""
        failures: list[Exception] = []
        for url in self.brokers.order():
            try:
                return await self._run_at(url, call)
            except (ApiError, BrokerUnreachable) as exc:
                failures.append(self.brokers.pass_over(url, exc, call))
        raise self.brokers.all_failed(failures)

    async def _run_at(self, url: str, call: Call[T]) -> T:
        try:
            value = await self.client(url).run(call)
        except Redirected as moved:
            url = leader_url(moved, call)
            try:
                value = await self.client(url).run(call)
            except Redirected as again:
                raise ApiError(503, f"{moved}, and {again}") from None
        self.brokers.answered(url)
        return value

    async def aclose(self) -> None:
        for client in self.made():
            await client.aclose()
