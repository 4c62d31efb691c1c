"""A heartbeat is renewed on the loop; only what it must read or write goes to the store.

On PostgreSQL the broker's store work runs on one thread (store/runner.py). A heartbeat
that brings no news (the same jobs, each bound here in this run) is answered from memory
while that thread is held by another unit; one that changes the worker waits for the
thread, and the loop answers /healthz meanwhile. Off the loop, a write of the worker
that lands between the loop's judgement and the thread's write (a cordon) is kept, and
the heartbeat applied over it.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
import sqlalchemy as sa

from jobd.broker.state import BrokerConfig, BrokerState
from jobd.controllers.verbs import drain, worker_lease
from tests.integration.conftest import TOKEN, broker_client, broker_state, job_document

pytestmark = pytest.mark.anyio

REGISTRATION = {"spec": {"slots": 2, "gpus": []}, "hostname": "h", "runner": "procgroup"}


@pytest.fixture
async def api(store_url: str, tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    config = BrokerConfig(
        data_dir=tmp_path / "data", log_dir=tmp_path / "logs", db_url=store_url, token=TOKEN
    )
    async with broker_client(config) as client:
        assert (await client.put("/workers/w1", json=REGISTRATION)).status_code == 200
        yield client


@pytest.fixture
async def pg_api(postgres_url: str, tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    config = BrokerConfig(
        data_dir=tmp_path / "data", log_dir=tmp_path / "logs", db_url=postgres_url, token=TOKEN
    )
    async with broker_client(config) as client:
        assert (await client.put("/workers/w1", json=REGISTRATION)).status_code == 200
        yield client


async def _beat(api: httpx.AsyncClient, running: list[int]) -> dict[str, Any]:
    answer = await api.post("/workers/w1/heartbeat", json={"running": running})
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


def _holding_the_thread(state: BrokerState, release: threading.Event) -> bool:
    """A unit that keeps the store's thread (and a transaction) until released."""
    with state.store.engine.begin() as conn:  # type: ignore[attr-defined]
        conn.execute(sa.text("SELECT 1"))
        return release.wait(timeout=30)


async def test_a_heartbeat_without_news_is_answered_while_the_store_thread_is_busy(
    pg_api: httpx.AsyncClient,
) -> None:
    state = broker_state(pg_api)
    assert state.ctx.runner.off_loop
    release = threading.Event()
    async with anyio.create_task_group() as tg:
        tg.start_soon(state.ctx.runner.run, _holding_the_thread, state, release)
        await anyio.sleep(0.05)
        with anyio.fail_after(10):  # would wait for the thread if it needed it
            answer = await _beat(pg_api, [])
        release.set()
    assert answer["stop"] == [] and answer["worker"]["status"]["jobs"] == []


async def test_a_heartbeat_with_news_is_written_on_the_store_thread(
    pg_api: httpx.AsyncClient,
) -> None:
    state = broker_state(pg_api)
    created = await pg_api.post("/jobs", json=job_document("elsewhere", worker="w2"))
    job_id = created.json()["metadata"]["id"]  # not bound here: to be stopped, and recorded
    release = threading.Event()
    answers: list[dict[str, Any]] = []

    async def beat() -> None:
        answers.append(await _beat(pg_api, [job_id]))

    async with anyio.create_task_group() as tg:
        tg.start_soon(state.ctx.runner.run, _holding_the_thread, state, release)
        await anyio.sleep(0.05)
        tg.start_soon(beat)
        await anyio.sleep(0.05)
        assert answers == []  # queued behind the unit that holds the thread
        assert (await pg_api.get("/healthz")).status_code == 200
        release.set()
    [answer] = answers
    assert answer["stop"] == [job_id]
    stored = state.store.get_worker("w1")
    assert stored is not None and stored.status.jobs == [job_id]
    assert [e.job for e in state.store.list_events(event="worker_unknown_job")] == [job_id]


async def test_a_cordon_landing_between_the_loop_and_the_write_is_kept(
    api: httpx.AsyncClient,
) -> None:
    state = broker_state(api)
    ctx = state.ctx
    renewal = worker_lease.renew(ctx, "w1", [41])
    assert renewal.changed and renewal.needs_store
    drain.cordon(ctx, "w1", True)  # written after the loop judged the heartbeat
    worker, stop = worker_lease.settle(ctx, renewal)
    stored = state.store.get_worker("w1")
    assert stored is not None
    assert stored.spec.cordoned and stored.status.jobs == [41]
    assert worker.metadata.resource_version == stored.metadata.resource_version
    assert stop == [41]


async def test_a_quiet_heartbeat_needs_no_store(api: httpx.AsyncClient) -> None:
    ctx = broker_state(api).ctx
    renewal = worker_lease.renew(ctx, "w1", [])
    assert not renewal.changed and not renewal.needs_store
    assert worker_lease.renew(ctx, "w1", [7]).needs_store  # a job the view does not bind here


async def test_a_quiet_heartbeat_answers_the_time_and_leaves_the_view_as_it_was(
    api: httpx.AsyncClient,
) -> None:
    ctx = broker_state(api).ctx
    held = ctx.view.workers["w1"]
    before = held.status.last_renewal
    assert isinstance(ctx.clock.now(), type(before))
    worker, stop = worker_lease.heartbeat(ctx, "w1", [])
    assert stop == [] and worker is not held
    assert worker.status.last_renewal >= before
    assert ctx.view.workers["w1"] is held and held.status.last_renewal == before
    assert worker.metadata.resource_version == held.metadata.resource_version  # not written
