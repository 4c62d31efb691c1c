"""`job preempt`, `job preempt-blockers` and checkpoint-complete, at the controller level."""

from __future__ import annotations

import pytest

from jobd.api.models import Job, JobSpec, ObjectMeta, Phase, Resources, WorkerSpec
from jobd.controllers.context import Context
from jobd.controllers.errors import TransitionError
from jobd.controllers.scheduler import SchedulerController
from jobd.controllers.verbs import reports
from jobd.controllers.verbs.admission import create_jobs
from jobd.controllers.verbs.preempt import preempt_blockers, request_preemption
from jobd.controllers.verbs.reports import record_checkpoint_complete
from jobd.controllers.verbs.worker_lease import register_worker
from jobd.store.base import Conflict
from tests.integration.conftest import reread

pytestmark = pytest.mark.anyio


def _submit(ctx: Context, name: str, priority: int, gpus: int = 0, **spec: object) -> Job:
    job = Job(
        metadata=ObjectMeta(name=name, project="p"),
        spec=JobSpec(command=["true"], priority=priority, resources=Resources(gpus=gpus), **spec),
    )
    return create_jobs(ctx.store, [job], ctx.clock)[0]


async def _running(
    ctx: Context, name: str, priority: int, gpus: int = 0, preemptible: bool = True
) -> Job:
    job = _submit(ctx, name, priority, gpus=gpus, preemptible=preemptible)
    await SchedulerController(ctx).reconcile("queue")
    bound = reread(ctx, job)
    assert bound.status.phase == Phase.SCHEDULED
    return reports.report_started(ctx, bound, bound.status.worker or "")


def _revisions(ctx: Context) -> tuple[int, int]:
    return ctx.store.revision(), len(ctx.store.list_events())


async def test_preempt_drives_a_running_job_and_records_a_bare_auto_preempt(ctx: Context) -> None:
    register_worker(ctx, "w", WorkerSpec(slots=1), "host", "procgroup")
    job = await _running(ctx, "victim", 3)
    job = request_preemption(ctx, job, "manual")
    assert job.status.desired_phase == Phase.PREEMPTED
    assert job.status.signal == "preempt"
    [event] = ctx.store.list_events(event="auto_preempt")
    assert event.job == job.id
    assert event.fields == {
        "candidate_job": None,
        "reason": "manual",
        "priority": 3,
        "candidate_priority": None,
    }


async def test_preempt_refuses_a_job_that_is_not_running_and_changes_nothing(
    ctx: Context,
) -> None:
    register_worker(ctx, "w", WorkerSpec(slots=1), "host", "procgroup")
    running = await _running(ctx, "running", 1)
    queued = _submit(ctx, "queued", 1)
    await SchedulerController(ctx).reconcile("queue")
    for job in (reread(ctx, queued), reread(ctx, running)):
        if job.id == running.id:  # already being preempted: a second request is refused
            request_preemption(ctx, job, "manual")
            job = reread(ctx, job)
        before, seen = _revisions(ctx)
        with pytest.raises(TransitionError):
            request_preemption(ctx, job, "manual")
        assert reread(ctx, job).metadata.resource_version == job.metadata.resource_version
        assert _revisions(ctx) == (before, seen)


async def test_preempt_refuses_scheduled_and_finished_jobs(ctx: Context) -> None:
    register_worker(ctx, "w", WorkerSpec(slots=2), "host", "procgroup")
    done = await _running(ctx, "done", 1)
    done = reports.report_complete(ctx, done, "w", 0, None)
    scheduled = _submit(ctx, "scheduled", 1)
    await SchedulerController(ctx).reconcile("queue")
    for job in (done, reread(ctx, scheduled)):
        rv = job.metadata.resource_version
        with pytest.raises(TransitionError):
            request_preemption(ctx, job, "manual")
        assert reread(ctx, job).metadata.resource_version == rv
    assert ctx.store.list_events(event="auto_preempt") == []


async def test_preempt_blockers_dry_run_returns_the_plan_and_changes_nothing(
    ctx: Context,
) -> None:
    register_worker(ctx, "w", WorkerSpec(slots=2), "host", "procgroup")
    low = await _running(ctx, "low", 1)
    await _running(ctx, "high", 50)
    candidate = _submit(ctx, "candidate", 10)
    before = _revisions(ctx)
    plan = preempt_blockers(ctx, reread(ctx, candidate), dry_run=True)
    assert plan.worker == "w"
    assert [v.id for v in plan.victims] == [low.id]
    assert _revisions(ctx) == before
    assert reread(ctx, low).status.desired_phase == Phase.RUNNING
    assert reread(ctx, candidate).status.nominated_worker is None


async def test_preempt_blockers_preempts_the_plan_and_nominates_the_candidate(
    ctx: Context,
) -> None:
    register_worker(ctx, "w", WorkerSpec(slots=2), "host", "procgroup")
    low = await _running(ctx, "low", 1)
    high = await _running(ctx, "high", 50)
    candidate = _submit(ctx, "candidate", 10)
    plan = preempt_blockers(ctx, reread(ctx, candidate), dry_run=False)
    assert [v.id for v in plan.victims] == [low.id]

    low = reread(ctx, low)
    assert low.status.desired_phase == Phase.PREEMPTED
    assert low.status.signal == "preempt"
    assert reread(ctx, high).status.desired_phase == Phase.RUNNING
    [event] = ctx.store.list_events(event="auto_preempt")
    assert event.as_json() | {"ts": None} == {
        "ts": None,
        "event": "auto_preempt",
        "job": low.id,
        "worker": "w",
        "candidate_job": candidate.id,
        "reason": "blockers",
        "priority": 1,
        "candidate_priority": 10,
    }
    assert reread(ctx, candidate).status.nominated_worker == "w"


async def test_preempt_blockers_ignores_the_sweepers_thresholds(ctx: Context) -> None:
    # Just started and just queued: the sweeper would wait; the operator need not.
    register_worker(ctx, "w", WorkerSpec(slots=1), "host", "procgroup")
    low = await _running(ctx, "low", 1)
    candidate = _submit(ctx, "candidate", 10)
    plan = preempt_blockers(ctx, reread(ctx, candidate), dry_run=False)
    assert [v.id for v in plan.victims] == [low.id]


async def test_preempt_blockers_refuses_when_only_equal_or_higher_priority_blocks(
    ctx: Context,
) -> None:
    register_worker(ctx, "w", WorkerSpec(slots=1), "host", "procgroup")
    await _running(ctx, "equal", 10)
    candidate = _submit(ctx, "candidate", 10)
    before = _revisions(ctx)
    with pytest.raises(TransitionError):
        preempt_blockers(ctx, reread(ctx, candidate), dry_run=False)
    assert _revisions(ctx) == before


async def test_preempt_blockers_leaves_jobs_that_are_not_preemptible(ctx: Context) -> None:
    register_worker(ctx, "w", WorkerSpec(slots=1), "host", "procgroup")
    await _running(ctx, "pinned", 1, preemptible=False)
    candidate = _submit(ctx, "candidate", 10)
    before = _revisions(ctx)
    with pytest.raises(TransitionError, match="preemptible"):
        preempt_blockers(ctx, reread(ctx, candidate), dry_run=False)
    assert _revisions(ctx) == before


async def test_preempt_blockers_refuses_a_job_waiting_on_dependencies(ctx: Context) -> None:
    register_worker(ctx, "w", WorkerSpec(slots=1), "host", "procgroup")
    await _running(ctx, "low", 1)
    _submit(ctx, "parent", 0)
    child = _submit(ctx, "child", 10, depends_on=["parent"])
    before = _revisions(ctx)
    with pytest.raises(TransitionError, match="dependencies"):
        preempt_blockers(ctx, reread(ctx, child), dry_run=False)
    assert _revisions(ctx) == before


async def test_preempt_blockers_refuses_a_job_that_is_not_queued(ctx: Context) -> None:
    register_worker(ctx, "w", WorkerSpec(slots=1), "host", "procgroup")
    running = await _running(ctx, "running", 10)
    with pytest.raises(TransitionError):
        preempt_blockers(ctx, running, dry_run=True)


async def test_checkpoint_complete_is_recorded_once_with_the_preemptions_candidate(
    ctx: Context,
) -> None:
    register_worker(ctx, "w", WorkerSpec(slots=1), "host", "procgroup")
    victim = await _running(ctx, "victim", 1)
    candidate = _submit(ctx, "candidate", 10)
    preempt_blockers(ctx, reread(ctx, candidate), dry_run=False)
    victim = reports.report_stopping(ctx, reread(ctx, victim), "w")

    for _ in range(3):  # the worker retries until it is acknowledged
        recorded = record_checkpoint_complete(ctx, reread(ctx, victim), "w")
        assert recorded.status.preemption is not None
        assert recorded.status.preemption.checkpoint_complete is True
    with pytest.raises(Conflict):  # a racing retry on a stale read cannot write twice
        record_checkpoint_complete(ctx, victim, "w")

    [preempt] = ctx.store.list_events(event="auto_preempt")
    [checkpoint] = ctx.store.list_events(event="checkpoint_complete")
    assert checkpoint.job == preempt.job == victim.id
    assert checkpoint.fields["candidate_job"] == preempt.fields["candidate_job"] == candidate.id
    assert checkpoint.worker == "w"
    assert checkpoint.seq > preempt.seq

    victim = reports.report_complete(ctx, reread(ctx, victim), "w", 0, None)
    assert victim.status.phase == Phase.PREEMPTED, "exit 0 after SIGTERM is still a preemption"


async def test_checkpoint_complete_is_refused_without_a_preemption(ctx: Context) -> None:
    register_worker(ctx, "w", WorkerSpec(slots=1), "host", "procgroup")
    job = await _running(ctx, "job", 1)
    with pytest.raises(TransitionError):
        record_checkpoint_complete(ctx, job, "w")
    preempting = request_preemption(ctx, job, "manual")
    with pytest.raises(TransitionError):
        record_checkpoint_complete(ctx, preempting, "another-worker")
    assert ctx.store.list_events(event="checkpoint_complete") == []
