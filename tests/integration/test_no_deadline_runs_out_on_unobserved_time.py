"""Lease expiry and the Lost timeout count only time the broker observed.

A stalled event loop (both clocks jump between two looks), a suspended host (the wall
clock jumps, Linux's monotonic clock does not) and the time before the broker started
are not silence from a worker. The workers and lifecycle loops run against a real
SQLite store on a FakeClock; `ctx.observed.look()` stands for the broker's once-a-second
watch (controllers/observed.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from jobd.api.models import Job, JobSpec, ObjectMeta, Phase, WorkerSpec
from jobd.controllers.clock import FakeClock
from jobd.controllers.context import Context, Settings
from jobd.controllers.lifecycle import LifecycleController
from jobd.controllers.scheduler import SchedulerController
from jobd.controllers.verbs import reports
from jobd.controllers.verbs.admission import create_jobs
from jobd.controllers.verbs.worker_lease import register_worker
from jobd.controllers.workers import WorkersController
from jobd.store.sql import open_store
from tests.integration.conftest import reread

pytestmark = pytest.mark.anyio

LEASE_S = 15.0
LOST_TIMEOUT_S = 60.0
GAP_S = 5.0


@pytest.fixture
def ctx(tmp_path: Path) -> Iterator[Context]:
    store = open_store(f"sqlite:///{tmp_path}/jobd.db")
    settings = Settings(lost_timeout_s=LOST_TIMEOUT_S, unobserved_gap_s=GAP_S)
    yield Context(store, settings, FakeClock())
    store.close()


def _clock(ctx: Context) -> FakeClock:
    assert isinstance(ctx.clock, FakeClock)
    return ctx.clock


def _watched(ctx: Context, seconds: int) -> None:
    """`seconds` pass one by one, the broker looking at the time each second."""
    for _ in range(seconds):
        _clock(ctx).advance(1)
        ctx.observed.look()


async def _running_job(ctx: Context) -> Job:
    spec = WorkerSpec(slots=1, lease_duration_s=LEASE_S)
    register_worker(ctx, "w", spec, "host", "procgroup")
    job = Job(metadata=ObjectMeta(name="j", project="p"), spec=JobSpec(command=["true"]))
    job = create_jobs(ctx.store, [job], ctx.clock)[0]
    await SchedulerController(ctx).reconcile("queue")
    bound = reread(ctx, job)
    return reports.report_started(ctx, bound, "w", bound.status.attempt)


def _worker_phase(ctx: Context) -> str:
    worker = ctx.store.get_worker("w")
    assert worker is not None
    return worker.status.phase


@pytest.mark.parametrize(
    "blackout",
    [
        pytest.param(lambda clock: clock.advance(600), id="stalled-loop"),
        pytest.param(lambda clock: clock.suspend(3600), id="suspended-host"),
    ],
)
async def test_a_lease_does_not_run_out_on_time_the_broker_missed(
    ctx: Context, blackout: Callable[[FakeClock], None]
) -> None:
    await _running_job(ctx)
    ctx.observed.look()  # the broker's watch has begun
    _watched(ctx, 5)

    with capture_logs() as logs:
        blackout(_clock(ctx))
        result = await WorkersController(ctx).reconcile("w")

    assert _worker_phase(ctx) == "Ready"
    assert result.requeue_after == pytest.approx(LEASE_S - 5)
    assert [entry["event"] for entry in logs] == ["time_unobserved"]
    _watched(ctx, 9)
    await WorkersController(ctx).reconcile("w")
    assert _worker_phase(ctx) == "Ready"
    _watched(ctx, 2)
    await WorkersController(ctx).reconcile("w")
    assert _worker_phase(ctx) == "Lost", "silence the broker saw still counts"


async def test_a_short_pause_is_counted_as_time_that_passed(ctx: Context) -> None:
    await _running_job(ctx)
    ctx.observed.look()
    _clock(ctx).advance(GAP_S)  # not longer than the gap: seen, as a slow turn
    ctx.observed.look()
    result = await WorkersController(ctx).reconcile("w")
    assert result.requeue_after == pytest.approx(LEASE_S - GAP_S)


async def test_a_lost_job_does_not_time_out_on_a_stall(ctx: Context) -> None:
    job = await _running_job(ctx)
    ctx.observed.look()
    _watched(ctx, int(LEASE_S) + 1)
    await WorkersController(ctx).reconcile("w")
    assert reread(ctx, job).status.phase == Phase.LOST
    lifecycle = LifecycleController(ctx)

    _watched(ctx, 20)
    _clock(ctx).advance(3600)  # the loop stalls for an hour
    result = await lifecycle.reconcile(str(job.id))

    assert reread(ctx, job).status.phase == Phase.LOST
    assert result.requeue_after == pytest.approx(LOST_TIMEOUT_S - 20)
    _watched(ctx, int(LOST_TIMEOUT_S) - 20 + 1)
    await lifecycle.reconcile(str(job.id))
    assert reread(ctx, job).status.phase == Phase.FAILED


async def test_a_new_broker_counts_the_lost_timeout_from_its_own_start(
    ctx: Context, tmp_path: Path
) -> None:
    job = await _running_job(ctx)
    _clock(ctx).advance(LEASE_S + 1)
    await WorkersController(ctx).reconcile("w")
    assert reread(ctx, job).status.phase == Phase.LOST

    _clock(ctx).advance(3 * LOST_TIMEOUT_S)  # the broker is down meanwhile
    restarted = Context(ctx.store, ctx.settings, ctx.clock)  # starts now
    result = await LifecycleController(restarted).reconcile(str(job.id))

    assert reread(ctx, job).status.phase == Phase.LOST
    assert result.requeue_after == pytest.approx(LOST_TIMEOUT_S)
