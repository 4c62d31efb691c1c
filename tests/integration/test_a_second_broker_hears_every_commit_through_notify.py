"""A broker that did not make a change hears it from the store, woken by NOTIFY.

Two stores on one PostgreSQL database stand for two brokers: `writer` commits, the
other follows (store/sql/follow.py, broker/streams/following.py). What the follower's
listeners hear is every change, in revision order, once, whether a notification woke
it, its own commit found a gap, or it caught up after listening again. A broker app
on the second store (its loops not running: it only follows) answers a watch with the
writer's change within milliseconds; a watch from a revision compacted away gets 410,
and a follower that was away past the compaction rebuilds from the store.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path

import anyio
import httpx
import pytest
import sqlalchemy as sa
from structlog.testing import capture_logs

from jobd.api.models import ObjectMeta, Project
from jobd.broker.state import BrokerConfig
from jobd.store.base import Change, EventRecord, Gone
from jobd.store.sql import SQLStore, normalize_url, open_store
from tests.integration.conftest import TOKEN, broker_client, broker_state, job_document

pytestmark = [pytest.mark.postgres, pytest.mark.anyio]


class Heard:
    """A listener that keeps the revisions it heard, in order."""

    def __init__(self) -> None:
        self.revisions: list[int] = []

    def __call__(self, changes: Sequence[Change], _events: Sequence[EventRecord]) -> None:
        self.revisions += [change.revision for change in changes]


@pytest.fixture
def writer(postgres_url: str) -> Iterator[SQLStore]:
    opened = open_store(postgres_url)
    yield opened
    opened.close()


@pytest.fixture
def follower(postgres_url: str) -> Iterator[SQLStore]:
    """A second store on the database, following from its revision at the start."""
    opened = open_store(postgres_url)
    opened.follow_from(opened.revision())
    yield opened
    opened.close()


@pytest.fixture
def heard(follower: SQLStore) -> Heard:
    listener = Heard()
    follower.subscribe(listener)
    return listener


def _project(name: str) -> Project:
    return Project(metadata=ObjectMeta(name=name))


def _written(store: SQLStore, count: int, prefix: str = "p") -> list[int]:
    return [
        store.put_project(_project(f"{prefix}{i}")).metadata.resource_version or 0
        for i in range(count)
    ]


async def test_a_notification_names_the_commit_and_the_follow_reads_it_once(
    writer: SQLStore, follower: SQLStore, heard: Heard
) -> None:
    async with follower.change_signal() as signal:
        start = time.monotonic()
        [revision] = _written(writer, 1)
        assert await signal.wait(5.0) == revision
        woke_s = time.monotonic() - start
        assert follower.follow(revision) == 1
        assert follower.follow(revision) == 0  # heard already: nothing read again
    assert heard.revisions == [revision]
    assert woke_s < 1.0  # milliseconds, in fact; a second leaves room for a loaded machine


async def test_many_commits_are_heard_in_order_once(
    writer: SQLStore, follower: SQLStore, heard: Heard
) -> None:
    written = []
    async with follower.change_signal() as signal:
        for batch in range(5):
            written += _written(writer, 7, prefix=f"b{batch}-")
            follower.follow(await signal.wait(5.0))
        follower.follow()
    assert heard.revisions == written


def test_an_own_commit_after_a_gap_is_heard_after_what_came_before(
    writer: SQLStore, follower: SQLStore, heard: Heard
) -> None:
    """A standby that becomes leader before it read the old leader's last commits."""
    theirs = _written(writer, 3, prefix="theirs-")
    mine = _written(follower, 1, prefix="mine-")
    assert heard.revisions == theirs + mine
    assert follower.follow() == 0


def test_a_follower_behind_the_compaction_is_told_gone(
    writer: SQLStore, follower: SQLStore
) -> None:
    _written(writer, 5)
    writer.compact(keep=1)
    with pytest.raises(Gone):
        follower.follow()


@pytest.fixture
async def standby(tmp_path: Path, postgres_url: str) -> AsyncIterator[httpx.AsyncClient]:
    """A broker's app on the shared store with only its follower running: no loops."""
    config = BrokerConfig(
        data_dir=tmp_path / "data", log_dir=tmp_path / "logs", token=TOKEN, db_url=postgres_url
    )
    async with broker_client(config) as client:
        follower = broker_state(client).follower
        # No read without a notification within the tests: what they see, NOTIFY woke.
        follower.safety_net_s, follower.retry_s = 30.0, 0.05
        async with anyio.create_task_group() as tg:
            tg.start_soon(follower.run)
            yield client
            tg.cancel_scope.cancel()


async def _watch(api: httpx.AsyncClient, since: int, timeout: float = 5.0) -> httpx.Response:
    return await api.get("/watch", params={"since": since, "kind": "Job", "timeout": timeout})


async def test_a_watch_on_the_standby_sees_a_job_created_through_the_leader(
    leader: httpx.AsyncClient, standby: httpx.AsyncClient
) -> None:
    listed = (await standby.get("/jobs")).json()
    async with anyio.create_task_group() as tg:
        answers: list[httpx.Response] = []

        async def watch() -> None:
            answers.append(await _watch(standby, listed["revision"]))

        tg.start_soon(watch)
        await anyio.sleep(0.2)  # the watch is waiting
        created = await _create_through(leader, "seen")
        start = time.monotonic()
    took_s = time.monotonic() - start
    [answer] = answers
    [change] = answer.json()["changes"]
    assert (change["op"], change["object"]["metadata"]["id"]) == ("ADDED", created)
    assert took_s < 1.0  # milliseconds, in fact (the watch waits up to 5 s)
    # The standby's own reads agree with the watch.
    assert (await standby.get(f"/jobs/{created}")).json()["metadata"]["name"] == "seen"


@pytest.fixture
async def leader(tmp_path: Path, postgres_url: str) -> AsyncIterator[httpx.AsyncClient]:
    """Another broker's app on the same store, through which jobs are created."""
    root = tmp_path / "leader"
    config = BrokerConfig(
        data_dir=root / "data", log_dir=root / "logs", token=TOKEN, db_url=postgres_url
    )
    async with broker_client(config) as client:
        yield client


async def _create_through(api: httpx.AsyncClient, name: str) -> int:
    answer = await api.post("/jobs", json=job_document(name))
    assert answer.status_code == 201, answer.text
    return int(answer.json()["metadata"]["id"])


@pytest.fixture
def compacted(writer: SQLStore) -> None:
    """Five changes written, all but the newest compacted away."""
    _written(writer, 5)
    writer.compact(keep=1)


async def test_a_watch_from_a_compacted_revision_gets_410_and_a_relist_resumes(
    compacted: None, leader: httpx.AsyncClient, standby: httpx.AsyncClient
) -> None:
    """A watcher that last saw revision 1, before the standby started, which the
    compaction has dropped since: told 410, it lists and watches from the list's revision."""
    assert (await _watch(standby, 1, timeout=0)).status_code == 410
    listed = (await standby.get("/jobs")).json()
    created = await _create_through(leader, "after-relist")
    answer = await _watch(standby, listed["revision"])
    assert [c["object"]["metadata"]["id"] for c in answer.json()["changes"]] == [created]


async def test_a_follower_away_past_the_compaction_rebuilds_from_the_store(
    writer: SQLStore, leader: httpx.AsyncClient, tmp_path: Path, postgres_url: str
) -> None:
    config = BrokerConfig(
        data_dir=tmp_path / "data", log_dir=tmp_path / "logs", token=TOKEN, db_url=postgres_url
    )
    async with broker_client(config) as standby:
        _written(writer, 5)
        writer.compact(keep=1)
        follower = broker_state(standby).follower
        follower.safety_net_s = 0.2
        with capture_logs() as logs:
            async with anyio.create_task_group() as tg:
                tg.start_soon(follower.run)
                await anyio.sleep(0.3)
                listed = (await standby.get("/jobs")).json()
                created = await _create_through(leader, "after-rebuild")
                answer = await _watch(standby, listed["revision"])
                tg.cancel_scope.cancel()
    assert [c["object"]["metadata"]["id"] for c in answer.json()["changes"]] == [created]
    assert [e["event"] for e in logs if e["event"] == "follower_rebuilding"] == [
        "follower_rebuilding"
    ]


def _drop_listeners(url: str) -> int:
    """End the LISTEN connections on the test's database, as a server restart would."""
    admin = sa.create_engine(normalize_url(url), poolclass=sa.pool.NullPool)
    try:
        with admin.connect() as conn:
            ended = conn.execute(
                sa.text(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND query LIKE 'LISTEN%'"
                )
            )
            return int(ended.scalar_one())
    finally:
        admin.dispose()


async def test_a_lost_listen_connection_is_opened_again_and_misses_nothing(
    postgres_url: str, leader: httpx.AsyncClient, standby: httpx.AsyncClient
) -> None:
    await anyio.sleep(0.2)  # the standby listens
    listed = (await standby.get("/jobs")).json()
    with capture_logs() as logs:
        assert _drop_listeners(postgres_url) == 1
        missed = await _create_through(leader, "while-not-listening")
        answer = await _watch(standby, listed["revision"])
    assert [c["object"]["metadata"]["id"] for c in answer.json()["changes"]] == [missed]
    said = [e["event"] for e in logs if e["event"].startswith("store_")]
    assert said == ["store_unreachable", "store_reachable"]


async def test_watchers_on_the_standby_see_every_change_in_order_once(
    writer: SQLStore, leader: httpx.AsyncClient, standby: httpx.AsyncClient
) -> None:
    broker_state(standby).follower.page = 3  # read a few at a time: the pages join up
    since = (await standby.get("/jobs")).json()["revision"]
    seen: list[int] = []
    async with anyio.create_task_group() as tg:
        for i in range(20):
            tg.start_soon(_create_through, leader, f"many-{i}")
        while len(seen) < 20:  # 20 creates: at least 20 changes
            answer = (await _watch(standby, since)).json()
            seen += [change["revision"] for change in answer["changes"]]
            since = answer["revision"]
    await anyio.sleep(0.3)  # and whatever the creates' commits held besides
    answer = (await _watch(standby, since, timeout=0)).json()
    seen += [change["revision"] for change in answer["changes"]]
    stored = [c.revision for c in writer.changes_since(seen[0] - 1) if c.kind == "Job"]
    assert seen == stored
    metrics = _metrics((await standby.get("/metrics")).text)
    assert metrics["jobd_store_reachable"] == 1
    assert metrics["jobd_store_followed_revision"] == writer.revision()
    assert metrics["jobd_store_followed_changes_total"] >= len(seen)


def _metrics(text: str) -> dict[str, float]:
    """The exposition's unlabelled samples, by name."""
    return {
        name: float(value)
        for line in text.splitlines()
        if not line.startswith("#") and "{" not in line and line.count(" ") == 1
        for name, value in [line.split(" ")]
    }
