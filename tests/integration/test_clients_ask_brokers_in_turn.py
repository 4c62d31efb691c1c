"""Which broker of several a client asks, when it asks the next, and where a 307 leads.

`Brokers` is the choice without I/O; the clients are driven against real HTTP servers on
this host (the standard library's), each answering as a broker in one state would: down
(nothing listening), 503, 307 to another, or 200.
"""

from __future__ import annotations

import http.server
import json
import pwd
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import anyio
import h11
import pytest

from jobd.cli.broker_client import JobdClient
from jobd.wire import calls
from jobd.wire.errors import ApiError, BrokerUnreachable, Redirected
from jobd.wire.failover import (
    FAILOVER_CONNECT_S,
    Brokers,
    connect_timeout,
    leader_url,
    split_servers,
)
from jobd.wire.plain_async import open_async_client
from jobd.worker.relay import Relay

DOWN = "http://127.0.0.1:9"  # the discard port: nothing listens there


class Broker(http.server.ThreadingHTTPServer):
    """Answers every request `status`, a job for 200, a leader's URL for 307; status 0:
    hangs up without an answer, as a broker killed while it held a watch."""

    def __init__(self, status: int, leader: str | None = None) -> None:
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _any(self) -> None:
                server.seen.append((self.command, self.path))
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if status == 0:
                    self.close_connection = True
                    return
                # A job, and a watch page too (of no change, at revision 42).
                answer = {"metadata": {"id": 1, "name": server.url}, "changes": [], "revision": 42}
                body = json.dumps(answer).encode()
                self.send_response(status)
                if status == 307 and leader is not None:
                    self.send_header("Location", leader + self.path)
                    self.send_header("X-Jobd-Leader", leader)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _any

            def log_message(self, *args: Any) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server_address[1]}"
        self.seen: list[tuple[str, str]] = []
        threading.Thread(target=self.serve_forever, daemon=True).start()


@pytest.fixture
def brokers() -> Iterator[dict[str, Broker]]:
    leader = Broker(200)
    made = {"leader": leader, "standby": Broker(307, leader.url), "busy": Broker(503)}
    yield made
    for broker in made.values():
        broker.shutdown()
        broker.server_close()


def test_the_list_is_split_and_each_address_checked() -> None:
    assert split_servers(" http://a:1/ , unix:///run/jobd.sock,") == [
        "http://a:1",
        "unix:///run/jobd.sock",
    ]
    with pytest.raises(ValueError, match="names no broker"):
        split_servers(" , ")
    with pytest.raises(ValueError, match="'ftp://a'"):
        split_servers("http://a,ftp://a")


def test_the_broker_that_answered_is_asked_first_and_one_that_failed_no_longer() -> None:
    brokers = Brokers("http://a,http://b,http://c")
    assert brokers.order() == ["http://a", "http://b", "http://c"]
    brokers.answered("http://c")
    assert brokers.order() == ["http://c", "http://a", "http://b"]
    brokers.failed("http://c")
    assert brokers.order() == ["http://a", "http://b", "http://c"]
    brokers.answered("http://d")  # a leader a 307 named joins the list
    assert brokers.order()[0] == "http://d" and "http://d" in brokers.urls


def test_a_write_that_may_have_been_applied_is_not_sent_to_the_next() -> None:
    brokers, read, write = Brokers("http://a,http://b"), calls.get_job(1), calls.cancel_job(1)
    refused = BrokerUnreachable("http://a", "refused", sent=False)
    cut = BrokerUnreachable("http://a", "lost the connection")
    assert brokers.try_next(refused, write) and brokers.try_next(cut, read)
    assert not brokers.try_next(cut, write)
    assert brokers.try_next(ApiError(503, "no leader"), write)
    assert not brokers.try_next(ApiError(409, "conflict"), write)


def test_a_307_names_the_leader_by_its_header_or_by_its_location() -> None:
    call = calls.get_job(7)
    assert leader_url(Redirected("s", "http://l:1/", None), call) == "http://l:1"
    moved = Redirected("s", None, "http://l:1/prefix/jobs/7?x=1")
    assert leader_url(moved, call) == "http://l:1/prefix"
    with pytest.raises(ApiError) as refused:
        leader_url(Redirected("s", "ftp://l", None), call)
    assert refused.value.status == 503


def test_the_cli_client_passes_a_down_and_a_503_broker_and_follows_a_307(
    brokers: dict[str, Broker],
) -> None:
    standby, busy, leader = brokers["standby"], brokers["busy"], brokers["leader"]
    with JobdClient(f"{DOWN},{busy.url},{standby.url}", None) as client:
        assert client.cancel_job(1)["metadata"]["name"] == leader.url
        assert client.server == leader.url  # asked first from now on
        assert client.get_job(1)["metadata"]["name"] == leader.url
    assert standby.seen == [("POST", "/jobs/1/cancel")]
    assert leader.seen == [("POST", "/jobs/1/cancel"), ("GET", "/jobs/1")]
    with JobdClient(f"{DOWN},{busy.url}", None) as client, pytest.raises(ApiError) as said:
        client.get_job(1)
    assert said.value.status == 503
    unreachable = pytest.raises(BrokerUnreachable, match="no jobd broker of")
    with JobdClient(f"{DOWN},http://127.0.0.1:7", None) as client, unreachable:
        client.get_job(1)


def test_the_agents_client_does_the_same(brokers: dict[str, Broker]) -> None:
    standby, busy, leader = brokers["standby"], brokers["busy"], brokers["leader"]

    async def main() -> Any:
        servers = f"{DOWN},{busy.url},{standby.url}"
        async with open_async_client(servers, None) as client:
            answer = await client.run(calls.cancel_job(1))
            return answer, client.server

    answer, preferred = anyio.run(main)
    assert answer["metadata"]["name"] == leader.url and preferred == leader.url
    assert leader.seen == [("POST", "/jobs/1/cancel")]


def test_the_relay_on_a_workers_host_does_the_same(brokers: dict[str, Broker]) -> None:
    """The relay forwards a user's request as it came: past a broker down (and the agent's
    socket-only URL, which it cannot vouch through) and a 503, on through a 307."""
    standby, busy, leader = brokers["standby"], brokers["busy"], brokers["leader"]
    servers = f"unix:///run/jobd/jobd.sock,{DOWN},{busy.url},{standby.url}"
    relay = Relay(servers, "worker-token", "w1")
    nobody = pwd.getpwnam("nobody").pw_uid

    async def main() -> list[tuple[int, Any]]:
        answers = []
        for method, target in (("GET", "/jobs/1"), ("POST", "/jobs/1/cancel")):
            request = h11.Request(method=method, target=target, headers=[("Host", "relay")])
            status, _, body = await relay._answer(nobody, request, b"")
            answers.append((status, json.loads(body)["metadata"]["name"]))
        await relay._http().aclose()
        return answers

    assert anyio.run(main) == [(200, leader.url), (200, leader.url)]
    assert standby.seen == [("GET", "/jobs/1")]  # the leader is asked first after that
    assert leader.seen == [("GET", "/jobs/1"), ("POST", "/jobs/1/cancel")]
    assert relay.brokers.preferred == leader.url


def test_a_watch_cut_off_resumes_from_its_revision_on_the_next_broker(
    brokers: dict[str, Broker],
) -> None:
    """A read goes on to the next broker even when it was sent: the same watch, from the
    same revision, so no change is missed and nothing is listed again."""
    killed, leader = Broker(0), brokers["leader"]
    try:
        with JobdClient(f"{killed.url},{leader.url}", None) as client:
            assert client.watch(41, timeout=1).revision == 42
        assert killed.seen == [("GET", "/watch?since=41&kind=Job&timeout=1")]
        assert leader.seen == killed.seen
    finally:
        killed.shutdown()
        killed.server_close()


def test_a_broker_whose_host_drops_connections_costs_a_short_connect_timeout(
    brokers: dict[str, Broker],
) -> None:
    """A listener that never accepts, its queue full, drops the next connection's packets,
    as a host that is down does: of several brokers, the next is asked after
    FAILOVER_CONNECT_S, not after the whole timeout."""
    leader = brokers["leader"]
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(0)
    queued = [socket.create_connection(silent.getsockname(), timeout=2)]  # the queue's one
    dropping = f"http://127.0.0.1:{silent.getsockname()[1]}"
    try:
        assert connect_timeout(f"{dropping},{leader.url}", 15.0) == FAILOVER_CONNECT_S
        assert connect_timeout(leader.url, 15.0) == 15.0  # one broker: as before
        began = time.monotonic()
        with JobdClient(f"{dropping},{leader.url}", None, timeout=15.0) as client:
            assert client.get_job(1)["metadata"]["name"] == leader.url
        assert time.monotonic() - began < FAILOVER_CONNECT_S + 5
    finally:
        for connection in [*queued, silent]:
            connection.close()
