"""The notification outbox over a real SQLite store and a real HTTP receiver.

Jobs end through the state machine and the store (as the broker ends them); the outbox
hears the commits, and a receiver on a real socket answers as a test needs: each format's
body, a target's own secret signing its body, a refusal (4xx) dropping one notification
without holding up the next, the queue's cap dropping the oldest while a receiver is down,
and a broker restart delivering again what was not delivered before it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import socket
import threading
from collections.abc import Awaitable, Callable, Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio
import pytest

from jobd.api.models import Job, JobSpec, NotifyTarget, ObjectMeta, Phase
from jobd.broker.notify.outbox import BrokerSink, NotifyConfig, Outbox
from jobd.controllers import transitions
from jobd.store.runner import StoreRunner
from jobd.store.sql import SQLStore, open_store, sqlite_url


class Receiver:
    """Records each POST; answers `status` (a list: the next answers, then 204)."""

    def __init__(self) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = int(s.getsockname()[1])
        self.got: list[dict[str, Any]] = []
        self.answers: list[int] = []
        self.server: ThreadingHTTPServer | None = None

    def start(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                status = receiver.answers.pop(0) if receiver.answers else 204
                receiver.got.append(
                    {
                        "path": self.path,
                        "headers": dict(self.headers),
                        "body": body,
                        "status": status,
                    }
                )
                self.send_response(status)
                self.end_headers()

            def log_message(self, *_args: Any) -> None:
                pass

        ThreadingHTTPServer.allow_reuse_address = True
        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def taken(self) -> list[dict[str, Any]]:
        return [g for g in self.got if g["status"] < 300]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    r.start()
    yield r
    r.stop()


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLStore]:
    s = open_store(sqlite_url(tmp_path))
    yield s
    s.close()


FAST = {"backoff_s": 0.05, "backoff_max_s": 0.2, "timeout_s": 2.0}


def _outbox(store: SQLStore, tmp_path: Path, **config: Any) -> Outbox:
    outbox = Outbox(
        store, StoreRunner(store, False), NotifyConfig(**FAST | config), tmp_path / "notify.json"
    )
    store.subscribe(outbox.on_commit)
    return outbox


def _end(store: SQLStore, phase: Phase, *targets: NotifyTarget, name: str = "train") -> Job:
    job = Job(
        metadata=ObjectMeta(name=name, project="default"),
        spec=JobSpec(command=["true"], notify=list(targets)),
    )
    (job,) = store.create_jobs([job])
    job.status.exit_code = 3 if phase == Phase.FAILED else 0
    ended, events = transitions.finish(job, phase, datetime.now(UTC), "why")
    return store.update_job(ended, events)


async def _running(outbox: Outbox, check: Callable[[], Awaitable[None]]) -> None:
    async with anyio.create_task_group() as tg:
        tg.start_soon(outbox.run)
        with anyio.fail_after(20):
            await check()
        tg.cancel_scope.cancel()


async def _until(done: Callable[[], bool]) -> None:
    while not done():
        await anyio.sleep(0.02)


def test_each_format_and_a_targets_own_secret(
    store: SQLStore, receiver: Receiver, tmp_path: Path
) -> None:
    outbox = _outbox(store, tmp_path, secret="broker-key")
    targets = [
        NotifyTarget(url=receiver.url("/json"), on=["Failed"], secret="own-key"),
        NotifyTarget(url=receiver.url("/slack"), on=["Failed"], format="slack"),
        NotifyTarget(url=receiver.url("/discord"), on=["Failed"], format="discord"),
        NotifyTarget(url=receiver.url("/never"), on=["Succeeded"]),
    ]
    job = _end(store, Phase.FAILED, *targets)

    async def check() -> None:
        await _until(lambda: len(receiver.got) == 3)
        await anyio.sleep(0.2)  # and no fourth

    anyio.run(_running, outbox, check)
    by_path = {g["path"]: g for g in receiver.got}
    assert sorted(by_path) == ["/discord", "/json", "/slack"]
    doc = json.loads(by_path["/json"]["body"])
    assert doc["phase"] == "Failed" and doc["exit_code"] == 3 and doc["reason"] == "why"
    assert doc["job"] == {
        "id": job.id,
        "name": "train",
        "project": "default",
        "uid": job.metadata.uid,
        "ref": "default/train",
    }
    assert doc["finished_at"] and doc["created_at"]
    line = f"jobd: job {job.id} (default/train) Failed: exit 3, why"
    assert json.loads(by_path["/slack"]["body"]) == {"text": line}
    assert json.loads(by_path["/discord"]["body"]) == {"content": line}
    own = hmac.new(b"own-key", by_path["/json"]["body"], hashlib.sha256).hexdigest()
    assert by_path["/json"]["headers"]["X-Jobd-Signature"] == f"sha256={own}"
    broker = hmac.new(b"broker-key", by_path["/slack"]["body"], hashlib.sha256).hexdigest()
    assert by_path["/slack"]["headers"]["X-Jobd-Signature"] == f"sha256={broker}"


def test_a_refusal_drops_one_notification_and_the_next_goes_through(
    store: SQLStore, receiver: Receiver, tmp_path: Path
) -> None:
    receiver.answers = [400]
    outbox = _outbox(
        store, tmp_path, sinks=(BrokerSink(receiver.url("/hook"), frozenset({"Succeeded"})),)
    )
    first = _end(store, Phase.SUCCEEDED, name="a")
    second = _end(store, Phase.SUCCEEDED, name="b")
    anyio.run(_running, outbox, lambda: _until(lambda: len(receiver.taken()) == 1))
    assert [g["status"] for g in receiver.got] == [400, 204]
    assert json.loads(receiver.taken()[0]["body"])["job"]["id"] == second.id
    dropped = store.list_events(job=first.id, event="notify_dropped")
    assert [(e.fields["sink"], e.fields["reason"]) for e in dropped] == [("webhook-0", "rejected")]
    assert outbox.counts["webhook-0", "dropped:rejected"] == 1


def test_a_down_receiver_gets_the_newest_within_the_cap_when_it_returns(
    store: SQLStore, receiver: Receiver, tmp_path: Path
) -> None:
    receiver.stop()
    sink = BrokerSink(receiver.url("/hook"), frozenset({"Succeeded"}))
    outbox = _outbox(store, tmp_path, sinks=(sink,), queue_cap=3)
    ended = [_end(store, Phase.SUCCEEDED, name=f"j{i}") for i in range(5)]

    async def check() -> None:
        await _until(lambda: outbox.counts["webhook-0", "failures"] >= 2)
        assert [s.up for s in outbox.sinks.values()] == [False]
        failed = store.list_events(event="notify_failed")
        assert [e.fields["error"] for e in failed] == ["ConnectError"]  # no URL in it
        receiver.start()
        await _until(lambda: len(receiver.taken()) == 3)

    anyio.run(_running, outbox, check)
    got = [json.loads(g["body"])["job"]["id"] for g in receiver.taken()]
    assert got == [job.id for job in ended[2:]]  # the two oldest dropped, the rest in order
    assert outbox.counts["webhook-0", "dropped:queue_full"] == 2
    assert len(store.list_events(event="notify_delivered")) == 1


def test_a_restart_delivers_again_what_was_not_delivered(
    store: SQLStore, receiver: Receiver, tmp_path: Path
) -> None:
    sink = BrokerSink(receiver.url("/hook"), frozenset({"Failed"}))
    first = _outbox(store, tmp_path, sinks=(sink,))
    anyio.run(_running, first, lambda: anyio.sleep(0.1))  # a first start: its state saved
    receiver.stop()
    job = _end(store, Phase.FAILED)
    anyio.run(_running, first, lambda: _until(lambda: first.counts["webhook-0", "failures"] > 0))
    # The broker stops here with the failed delivery still queued: nothing was taken.

    receiver.start()
    again = Outbox(
        store,
        StoreRunner(store, False),
        NotifyConfig(sinks=(sink,), **FAST),
        tmp_path / "notify.json",
    )
    # Until the outbox has heard the answer, not only until the receiver has the request:
    # stopped in between, it has not delivered (and saves nothing past it).
    anyio.run(_running, again, lambda: _until(lambda: again.counts["webhook-0", "delivered"] == 1))
    assert json.loads(receiver.taken()[0]["body"])["job"]["id"] == job.id
    assert json.loads((tmp_path / "notify.json").read_text())["delivered_through"] >= 1


def test_a_url_no_request_can_be_made_to_is_dropped_and_the_rest_go_on(
    store: SQLStore, receiver: Receiver, tmp_path: Path
) -> None:
    outbox = _outbox(store, tmp_path)
    bad = NotifyTarget(url="http://[::1/broken", on=["Succeeded"])
    job = _end(store, Phase.SUCCEEDED, bad, NotifyTarget(url=receiver.url("/ok")))
    anyio.run(_running, outbox, lambda: _until(lambda: len(receiver.taken()) == 1))
    dropped = store.list_events(job=job.id, event="notify_dropped")
    assert [(e.fields["sink"], e.fields["error"]) for e in dropped] == [
        ("notify-0", "refused: InvalidURL")
    ]
