"""A restarted broker binds nothing to a worker it has not heard from since it started.

The store of an earlier broker shows two workers Ready, both last heard an hour ago: one
is dead, one is alive and heartbeats once the new broker is up. The broker runs for real
(its ASGI lifespan: the controllers, the watch on observed time) on a real SQLite store,
on a FakeClock moved in steps of a second, as a running loop sees time pass. Asserted:
each worker is awaited for one lease, said in a `worker_awaited` event; no job goes to
the silent one; the one that speaks gets jobs at once; the silent one is Lost after
exactly one lease of time the broker observed, a stall of its loop not counted.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import httpx
import pytest

from jobd.api.models import WorkerSpec
from jobd.broker.app import create_app
from jobd.broker.state import BrokerConfig
from jobd.controllers.clock import FakeClock
from jobd.controllers.context import Context, Settings
from jobd.controllers.scheduler import SchedulerController
from jobd.controllers.verbs.worker_lease import register_worker
from jobd.store.sql import open_store, sqlite_url
from tests.integration.conftest import TOKEN, broker_state, job_document

pytestmark = pytest.mark.anyio

LEASE_S = 10.0
T0 = datetime(2026, 6, 1, 12, tzinfo=UTC)


def _earlier_broker_left(data_dir: Path) -> None:
    """The store as a broker left it an hour ago: `dead` and `live`, both Ready."""
    store = open_store(sqlite_url(data_dir))
    ctx = Context(store, Settings(), FakeClock(T0 - timedelta(hours=1)))
    for name, slots in (("dead", 2), ("live", 3)):
        spec = WorkerSpec(slots=slots, lease_duration_s=LEASE_S)
        register_worker(ctx, name, spec, name, "procgroup")
    store.close()


@asynccontextmanager
async def _broker(tmp_path: Path, clock: FakeClock) -> AsyncIterator[httpx.AsyncClient]:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    _earlier_broker_left(data_dir)
    config = BrokerConfig(data_dir=data_dir, log_dir=tmp_path / "logs", token=TOKEN)
    app = create_app(config, clock)
    transport = httpx.ASGITransport(app=app)
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://jobd", headers=headers) as api,
    ):
        yield api


async def _settle(clock: FakeClock) -> None:
    """Let the loops act on what just happened (a few ms of fake time, real turns)."""
    for _ in range(5):
        clock.advance(0.005)
        await anyio.sleep(0.01)


async def _step(api: httpx.AsyncClient, clock: FakeClock, seconds: int, beat: bool) -> None:
    """Let `seconds` pass one by one, `live` heartbeating every third second if `beat`."""
    for _ in range(seconds):
        clock.advance(1)
        if beat and round((clock.now() - T0).total_seconds()) % 3 == 0:
            await api.post("/workers/live/heartbeat", json={"running": []})
        await _settle(clock)


def _phase(api: httpx.AsyncClient, worker: str) -> str:
    found = broker_state(api).store.get_worker(worker)
    assert found is not None
    return found.status.phase


def _placement(api: httpx.AsyncClient) -> list[str | None]:
    return [job.status.worker for job in broker_state(api).store.list_jobs()]


async def test_a_silent_worker_gets_no_job_and_is_lost_after_one_observed_lease(
    tmp_path: Path,
) -> None:
    clock = FakeClock(T0)
    async with _broker(tmp_path, clock) as api:
        store = broker_state(api).store
        awaited = store.list_events(event="worker_awaited")
        deadline = (T0 + timedelta(seconds=LEASE_S)).isoformat(timespec="milliseconds")
        assert sorted(e.worker or "" for e in awaited) == ["dead", "live"]
        assert {e.fields["deadline"] for e in awaited} == {deadline.replace("+00:00", "Z")}

        for i in range(3):
            await api.post("/jobs", json=job_document(f"j{i}"))
        await _settle(clock)
        assert _placement(api) == [None, None, None], "nobody has spoken yet"

        await api.post("/workers/live/heartbeat", json={"running": []})
        await _settle(clock)
        assert _placement(api) == ["live", "live", "live"], "bound at its first word"

        await api.post("/jobs", json=job_document("more"))  # `dead` looks free: 2 slots
        await _step(api, clock, 4, beat=True)
        assert _placement(api)[3] is None
        assert _phase(api, "dead") == "Ready"

        clock.advance(60)  # the loop stalls: a minute nobody watched
        await _settle(clock)
        assert _phase(api, "dead") == "Ready", "a stall is no silence"
        assert store.list_events(event="worker_lost") == []

        await _step(api, clock, 5, beat=True)  # 9 observed seconds since start
        assert _phase(api, "dead") == "Ready"
        await _step(api, clock, 2, beat=True)
        assert _phase(api, "dead") == "Lost"
        assert _phase(api, "live") == "Ready"
        assert [e.worker for e in store.list_events(event="worker_lost")] == ["dead"]
        assert _placement(api)[3] is None, "and never anything after"


async def test_a_worker_that_registers_again_is_schedulable_at_once(tmp_path: Path) -> None:
    clock = FakeClock(T0)
    async with _broker(tmp_path, clock) as api:
        await api.post("/jobs", json=job_document("j"))
        await _settle(clock)
        assert _placement(api) == [None]
        registration = {"spec": {"slots": 2, "lease_duration_s": LEASE_S}, "hostname": "dead"}
        assert (await api.put("/workers/dead", json=registration)).status_code == 200
        # At once: no lease to wait out; only the tenth of a second in which workers'
        # registrations are gathered into one pass (manager.py, worker_coalesce_s).
        clock.advance(SchedulerController.worker_coalesce_s)
        await _settle(clock)
        assert _placement(api) == ["dead"]
