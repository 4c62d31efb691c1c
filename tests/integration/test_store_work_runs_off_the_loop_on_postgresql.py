"""On PostgreSQL the broker's store work runs on a thread of its own, and the loop serves on.

A unit of store work handed to the runner (store/runner.py) holds the server for as long
as it likes (`pg_sleep`) while `/healthz` is answered. Whoever commits, the listeners hear
every commit on the event loop's thread, in commit order, before the unit goes on and
before the awaiting caller resumes. On SQLite the runner runs the unit inline. Creates
that arrive together share one commit off the loop too, and one refused fails alone.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path

import anyio
import anyio.from_thread
import httpx
import pytest
import sqlalchemy as sa

from jobd.api.models import ObjectMeta, Project
from jobd.broker.state import BrokerConfig, BrokerState
from jobd.store.base import Change, EventRecord, StoreUnavailable
from jobd.store.runner import StoreRunner
from jobd.store.sql import SQLStore, open_store
from tests.integration.conftest import TOKEN, broker_client, broker_state, job_document

pytestmark = pytest.mark.anyio


@pytest.fixture
async def pg_api(postgres_url: str, tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    """The broker's API on a fresh PostgreSQL database."""
    config = BrokerConfig(
        data_dir=tmp_path / "data", log_dir=tmp_path / "logs", db_url=postgres_url, token=TOKEN
    )
    async with broker_client(config) as client:
        yield client


@pytest.fixture
def off_loop_store(store_url: str) -> Iterator[SQLStore]:
    opened = open_store(store_url)
    try:
        yield opened
    finally:
        opened.close()


async def test_a_slow_query_does_not_hold_healthz(pg_api: httpx.AsyncClient) -> None:
    """A unit sleeps in the server (up to 30 s) until the loop has answered /healthz;
    then the test cancels the query, so nothing here waits on a clock."""
    state = broker_state(pg_api)
    assert state.ctx.runner.off_loop
    engine = state.store.engine  # type: ignore[attr-defined]
    backend: list[int] = []
    started, finished = anyio.Event(), threading.Event()

    def slow() -> None:
        with engine.connect() as conn:
            backend.append(conn.execute(sa.text("SELECT pg_backend_pid()")).scalar_one())
            anyio.from_thread.run_sync(started.set)
            with pytest.raises(StoreUnavailable):  # cancelled below, as intended
                conn.execute(sa.text("SELECT pg_sleep(30)"))
        finished.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(state.ctx.runner.run, slow)
        await started.wait()
        answered = await pg_api.get("/healthz")
        assert answered.status_code == 200
        assert not finished.is_set()  # answered while the query still held the server
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT pg_cancel_backend(:pid)"), {"pid": backend[0]})
    assert finished.is_set()


async def test_a_unit_waiting_on_the_store_leaves_the_loop_free(pg_api: httpx.AsyncClient) -> None:
    """Deterministic: the unit holds a transaction open until the loop has answered."""
    state = broker_state(pg_api)
    answered = threading.Event()

    def holds_a_transaction() -> bool:
        with state.store.engine.begin() as conn:  # type: ignore[attr-defined]
            conn.execute(sa.text("SELECT 1"))
            return answered.wait(timeout=30)

    async with anyio.create_task_group() as tg:
        results: list[bool] = []

        async def run() -> None:
            results.append(await state.ctx.runner.run(holds_a_transaction))

        tg.start_soon(run)
        await anyio.sleep(0.05)
        assert (await pg_api.get("/healthz")).status_code == 200
        answered.set()
    assert results == [True]


async def test_listeners_hear_each_commit_on_the_loop_in_order_before_the_caller_resumes(
    off_loop_store: SQLStore,
) -> None:
    store = off_loop_store
    runner = StoreRunner(store, off_loop=True)
    loop_thread = threading.get_ident()
    heard: list[tuple[int, list[int]]] = []

    def listener(changes: Sequence[Change], _events: Sequence[EventRecord]) -> None:
        heard.append((threading.get_ident(), [c.revision for c in changes]))

    store.subscribe(listener)

    def unit(round_: int) -> list[int]:
        revisions = []
        for name in ("first", "second", "third"):
            put = store.put_project(Project(metadata=ObjectMeta(name=f"{name}-{round_}")))
            revisions.append(put.metadata.resource_version or 0)
        assert threading.get_ident() != loop_thread
        return revisions

    for round_ in range(3):  # each caller resumes with its unit's commits heard
        heard.clear()
        revisions = await runner.run(unit, round_)
        assert [thread for thread, _ in heard] == [loop_thread] * 3
        assert [revs for _, revs in heard] == [[r] for r in revisions]
        assert revisions == sorted(revisions)


async def test_commits_on_the_loop_and_on_the_thread_are_heard_in_commit_order(
    off_loop_store: SQLStore,
) -> None:
    store = off_loop_store
    runner = StoreRunner(store, off_loop=True)
    heard: list[int] = []
    store.subscribe(lambda changes, _events: heard.extend(c.revision for c in changes))

    def unit(name: str) -> None:
        store.put_project(Project(metadata=ObjectMeta(name=name)))

    async with anyio.create_task_group() as tg:
        for i in range(20):
            tg.start_soon(runner.run, unit, f"thread-{i}")
            store.put_project(Project(metadata=ObjectMeta(name=f"loop-{i}")))
            await anyio.sleep(0)
    assert len(heard) == 40
    assert heard == sorted(heard)


async def test_a_batch_is_heard_once_after_its_commit_off_the_loop(
    off_loop_store: SQLStore,
) -> None:
    store = off_loop_store
    runner = StoreRunner(store, off_loop=True)
    heard: list[list[str]] = []
    store.subscribe(lambda changes, _events: heard.append([c.key for c in changes]))

    def unit() -> int:
        with store.batch(durable=True):
            store.put_project(Project(metadata=ObjectMeta(name="a")))
            store.put_project(Project(metadata=ObjectMeta(name="b")))
            assert heard == []  # nothing is heard before the commit
        return 0

    await runner.run(unit)
    assert heard == [["a", "b"]]  # once, the whole batch, before the caller resumed


async def test_inline_runner_runs_on_the_loop(off_loop_store: SQLStore) -> None:
    runner = StoreRunner(off_loop_store, off_loop=False)
    assert await runner.run(threading.get_ident) == threading.get_ident()


async def test_creates_share_a_commit_and_fail_alone_off_the_loop(
    pg_api: httpx.AsyncClient,
) -> None:
    state: BrokerState = broker_state(pg_api)
    heard: list[int] = []
    state.store.subscribe(lambda changes, _events: heard.append(len(changes)))
    assert (await pg_api.post("/jobs", json=job_document("taken"))).status_code == 201
    statuses: dict[str, int] = {}

    async def create(name: str) -> None:
        statuses[name] = (await pg_api.post("/jobs", json=job_document(name))).status_code

    async with anyio.create_task_group() as tg:
        for name in ("one", "taken", "two"):
            tg.start_soon(create, name)
    assert statuses == {"one": 201, "taken": 409, "two": 201}
    names = {j.metadata.name for j in state.store.list_jobs()}
    assert names == {"taken", "one", "two"}
    # Each create's commit was heard on the loop before its request was answered.
    assert sum(heard) == 3
