"""`job preempt-blockers` for a job naming CPUs and memory (issue 23): the victims are the
jobs that give back what it lacks on the worker, not the lowest-priority job that holds
only a slot; the room freed is then held for it, in every dimension, against a job that
arrives meanwhile."""

from __future__ import annotations

import pytest

from jobd.api.models import Job, JobSpec, ObjectMeta, Phase, Resources, WorkerSpec
from jobd.controllers.context import Context
from jobd.controllers.scheduler import SchedulerController
from jobd.controllers.verbs import reports
from jobd.controllers.verbs.admission import create_jobs
from jobd.controllers.verbs.preempt import preempt_blockers
from jobd.controllers.verbs.worker_lease import register_worker
from tests.integration.conftest import reread

pytestmark = pytest.mark.anyio
GIB = 1 << 30


def _submit(ctx: Context, name: str, priority: int, **resources: object) -> Job:
    job = Job(
        metadata=ObjectMeta(name=name, project="p"),
        spec=JobSpec(
            command=["true"], priority=priority, preemptible=True, resources=Resources(**resources)
        ),
    )
    return create_jobs(ctx.store, [job], ctx.clock)[0]


async def _running(ctx: Context, name: str, priority: int, **resources: object) -> Job:
    job = _submit(ctx, name, priority, **resources)
    await SchedulerController(ctx).reconcile("queue")
    bound = reread(ctx, job)
    assert bound.status.phase == Phase.SCHEDULED, bound.status
    return reports.report_started(ctx, bound, bound.status.worker or "")


async def test_the_victim_is_the_job_holding_the_cpus_it_lacks(ctx: Context) -> None:
    register_worker(ctx, "w", WorkerSpec(slots=4, cpus=4, memory=8 * GIB), "host", "procgroup")
    slot_only = await _running(ctx, "slot-only", 1)
    cpus = await _running(ctx, "cpus", 2, cpus=3, memory=2 * GIB)
    memory = await _running(ctx, "memory", 1, memory=5 * GIB)
    queued = _submit(ctx, "queued", 50, cpus=2, memory=GIB)
    await SchedulerController(ctx).reconcile("queue")
    assert reread(ctx, queued).status.phase == Phase.PENDING, "one CPU is free, it asks two"

    dry = preempt_blockers(ctx, reread(ctx, queued), dry_run=True)
    assert [v.id for v in dry.victims] == [cpus.id], "not slot-only, the lowest priority"
    plan = preempt_blockers(ctx, reread(ctx, queued), dry_run=False)
    assert (plan.worker, [v.id for v in plan.victims]) == ("w", [cpus.id])
    assert reread(ctx, queued).status.nominated_worker == "w"
    assert reread(ctx, slot_only).status.desired_phase == Phase.RUNNING
    assert reread(ctx, memory).status.desired_phase == Phase.RUNNING

    victim = reread(ctx, cpus)
    reports.report_complete(ctx, victim, "w", exit_code=None, exit_signal=15)
    # A higher-priority job arriving now would take three of the four CPUs free (and leave
    # the queued job short again), but two of them are held for the queued job.
    late = _submit(ctx, "late", 60, cpus=3)
    await SchedulerController(ctx).reconcile("queue")
    assert reread(ctx, queued).status.phase == Phase.SCHEDULED
    assert reread(ctx, queued).status.worker == "w"
    assert reread(ctx, late).status.phase == Phase.PENDING
