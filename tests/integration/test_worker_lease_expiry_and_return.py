"""Worker leases: expiry leaves jobs Lost; the worker may reclaim them, or a timeout fails them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from jobd.api.models import Job, JobSpec, ObjectMeta, Phase, Resources, WorkerSpec
from jobd.controllers import lifecycle
from jobd.controllers.clock import FakeClock
from jobd.controllers.context import Context, Settings
from jobd.controllers.scheduler import SchedulerController
from jobd.controllers.verbs import reports
from jobd.controllers.verbs.admission import create_jobs
from jobd.controllers.verbs.preempt import request_preemption
from jobd.controllers.verbs.worker_lease import heartbeat, register_worker
from jobd.controllers.workers import WorkersController
from jobd.store.base import Conflict
from jobd.store.sql import open_store
from tests.integration.conftest import reread

pytestmark = pytest.mark.anyio

LEASE_S = 15.0
LOST_TIMEOUT_S = 60.0


@pytest.fixture
def ctx(tmp_path: Path) -> Iterator[Context]:
    store = open_store(f"sqlite:///{tmp_path}/jobd.db")
    yield Context(store, Settings(lost_timeout_s=LOST_TIMEOUT_S), FakeClock())
    store.close()


def _clock(ctx: Context) -> FakeClock:
    assert isinstance(ctx.clock, FakeClock)
    return ctx.clock


def _register(ctx: Context, name: str = "w", slots: int = 2, gpus: list[int] | None = None) -> None:
    spec = WorkerSpec(slots=slots, gpus=gpus or [], lease_duration_s=LEASE_S)
    register_worker(ctx, name, spec, "host", "procgroup")


def _submit(ctx: Context, name: str, gpus: int = 0, priority: int = 0) -> Job:
    job = Job(
        metadata=ObjectMeta(name=name, project="p"),
        spec=JobSpec(command=["true"], priority=priority, resources=Resources(gpus=gpus)),
    )
    return create_jobs(ctx.store, [job], ctx.clock)[0]


async def _start(ctx: Context, job: Job) -> Job:
    await SchedulerController(ctx).reconcile("queue")
    bound = reread(ctx, job)
    return reports.report_started(ctx, bound, bound.status.worker or "")


async def _expire(ctx: Context, name: str = "w") -> None:
    _clock(ctx).advance(LEASE_S + 1)
    await WorkersController(ctx).reconcile(name)


def _worker_phase(ctx: Context, name: str = "w") -> str:
    worker = ctx.store.get_worker(name)
    assert worker is not None
    return worker.status.phase


async def test_reconcile_asks_to_come_back_when_the_lease_would_run_out(ctx: Context) -> None:
    _register(ctx)
    controller = WorkersController(ctx)
    assert (await controller.reconcile("w")).requeue_after == pytest.approx(LEASE_S)
    _clock(ctx).advance(10)
    assert (await controller.reconcile("w")).requeue_after == pytest.approx(5)
    heartbeat(ctx, "w", [])
    assert (await controller.reconcile("w")).requeue_after == pytest.approx(LEASE_S)
    assert _worker_phase(ctx) == "Ready"


async def test_an_expired_lease_leaves_running_jobs_lost_and_unstarted_ones_pending(
    ctx: Context,
) -> None:
    _register(ctx, slots=3, gpus=[0])
    running = await _start(ctx, _submit(ctx, "running", gpus=1))
    preempting = await _start(ctx, _submit(ctx, "preempting"))
    preempting = request_preemption(ctx, preempting, "manual")
    reports.report_stopping(ctx, preempting, "w")
    unstarted = _submit(ctx, "unstarted")
    await SchedulerController(ctx).reconcile("queue")
    assert reread(ctx, unstarted).status.phase == Phase.SCHEDULED

    await _expire(ctx)

    assert _worker_phase(ctx) == "Lost"
    assert [e.worker for e in ctx.store.list_events(event="worker_lost")] == ["w"]
    for job in (running, preempting):
        lost = reread(ctx, job)
        assert lost.status.phase == Phase.LOST
        assert lost.status.lost_at == _clock(ctx).now()
        assert lost.status.worker == "w", "still bound: the worker may come back with it"
    assert reread(ctx, running).status.gpus == [0]
    assert reread(ctx, preempting).status.desired_phase == Phase.PREEMPTED
    back = reread(ctx, unstarted)
    assert back.status.phase == Phase.PENDING
    assert (back.status.worker, back.status.gpus) == (None, [])
    assert {e.job for e in ctx.store.list_events(event="job_lost")} == {running.id, preempting.id}


async def test_a_lost_workers_key_is_done_until_it_returns(ctx: Context) -> None:
    _register(ctx)
    await _expire(ctx)
    assert (await WorkersController(ctx).reconcile("w")).requeue_after is None
    assert (await WorkersController(ctx).reconcile("nobody")).requeue_after is None


async def test_nothing_is_bound_to_a_lost_worker(ctx: Context) -> None:
    _register(ctx)
    await _expire(ctx)
    job = _submit(ctx, "job")
    await SchedulerController(ctx).reconcile("queue")
    assert reread(ctx, job).status.phase == Phase.PENDING


async def test_a_returning_worker_reclaims_its_lost_job_and_is_told_to_stop_strays(
    ctx: Context,
) -> None:
    _register(ctx, "w")
    _register(ctx, "other")
    mine = await _start(ctx, _submit(ctx, "mine"))
    assert mine.status.worker == "other" or mine.status.worker == "w"
    worker = mine.status.worker or ""
    elsewhere = await _start(ctx, _submit(ctx, "elsewhere"))
    assert elsewhere.status.worker != worker
    await _expire(ctx, worker)
    assert reread(ctx, mine).status.phase == Phase.LOST

    returned, stop = heartbeat(ctx, worker, [mine.id, elsewhere.id, 9999])

    assert returned.status.phase == "Ready"
    assert sorted(stop) == [elsewhere.id, 9999]
    mine = reread(ctx, mine)
    assert mine.status.phase == Phase.RUNNING
    assert mine.status.lost_at is None
    assert [e.job for e in ctx.store.list_events(event="job_recovered")] == [mine.id]
    assert [e.worker for e in ctx.store.list_events(event="worker_recovered")] == [worker]
    assert reread(ctx, elsewhere).status.phase == Phase.RUNNING, "a stray report moves nothing"
    strays = ctx.store.list_events(event="worker_unknown_job")
    assert sorted(e.job or 0 for e in strays) == [elsewhere.id, 9999]


async def test_a_returning_worker_that_lost_a_job_has_it_failed(ctx: Context) -> None:
    _register(ctx)
    kept = await _start(ctx, _submit(ctx, "kept"))
    gone = await _start(ctx, _submit(ctx, "gone"))
    _clock(ctx).advance(10)
    await _expire(ctx)

    heartbeat(ctx, "w", [kept.id])

    assert reread(ctx, kept).status.phase == Phase.RUNNING
    gone = reread(ctx, gone)
    assert gone.status.phase == Phase.FAILED, "the broker must not wait for a job nobody runs"
    assert gone.status.reason == "process_vanished"


async def test_a_job_lost_longer_than_the_timeout_fails(ctx: Context) -> None:
    _register(ctx)
    job = await _start(ctx, _submit(ctx, "job"))
    await _expire(ctx)
    controller = lifecycle.LifecycleController(ctx)

    _clock(ctx).advance(20)
    result = await controller.reconcile(str(job.id))
    assert result.requeue_after == pytest.approx(LOST_TIMEOUT_S - 20)
    assert reread(ctx, job).status.phase == Phase.LOST

    _clock(ctx).advance(LOST_TIMEOUT_S - 20 + 0.001)
    assert (await controller.reconcile(str(job.id))).requeue_after is None
    job = reread(ctx, job)
    assert job.status.phase == Phase.FAILED
    assert job.status.reason == "worker_lost"
    [finished] = ctx.store.list_events(job=job.id, event="job_finished")
    assert finished.fields["phase"] == "Failed"


async def test_a_lost_job_being_preempted_ends_preempted(ctx: Context) -> None:
    _register(ctx)
    job = await _start(ctx, _submit(ctx, "job"))
    request_preemption(ctx, job, "manual")
    await _expire(ctx)
    _clock(ctx).advance(LOST_TIMEOUT_S + 1)
    await lifecycle.LifecycleController(ctx).reconcile(str(job.id))
    assert reread(ctx, job).status.phase == Phase.PREEMPTED


async def test_a_worker_returning_after_the_timeout_cannot_revive_the_job(ctx: Context) -> None:
    _register(ctx)
    job = await _start(ctx, _submit(ctx, "job"))
    await _expire(ctx)
    _clock(ctx).advance(LOST_TIMEOUT_S + 1)
    await lifecycle.LifecycleController(ctx).reconcile(str(job.id))

    _, stop = heartbeat(ctx, "w", [job.id])
    assert stop == [job.id]
    late = reports.report_complete(ctx, reread(ctx, job), "w", 0, None)
    assert late.status.phase == Phase.FAILED, "what was decided stays decided"


async def test_expiry_interrupted_by_a_conflict_finishes_on_the_next_pass(
    ctx: Context, monkeypatch: pytest.MonkeyPatch
) -> None:
    _register(ctx)
    first = await _start(ctx, _submit(ctx, "first"))
    second = await _start(ctx, _submit(ctx, "second"))
    real_update = ctx.store.update_job
    calls = {"n": 0}

    def racing_update(job: Job, events: object = ()) -> Job:
        calls["n"] += 1
        if calls["n"] == 2:  # someone else wrote the second job meanwhile
            raise Conflict("changed under us")
        return real_update(job, events)  # type: ignore[arg-type]

    monkeypatch.setattr(ctx.store, "update_job", racing_update)
    _clock(ctx).advance(LEASE_S + 1)
    controller = WorkersController(ctx)
    assert (await controller.reconcile("w")).requeue_after == 0
    monkeypatch.setattr(ctx.store, "update_job", real_update)
    await controller.reconcile("w")

    assert {reread(ctx, j).status.phase for j in (first, second)} == {Phase.LOST}
