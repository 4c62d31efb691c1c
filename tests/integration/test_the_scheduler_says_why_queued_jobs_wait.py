"""`Scheduled=False` reasons on a real store (SQLite and PostgreSQL) with the scheduler:
admission says each new job's (room, its parents, its array's cap) in the insert itself;
the scheduler corrects a member it passes over for its array's cap, once, and a second
pass writes nothing; the queue ahead of a job is counted off the queue's index."""

from __future__ import annotations

import pytest

from jobd.api.arrays import ArrayMeta, ArraySpec, JobArray, JobArraySpec
from jobd.api.models import Job, JobSpec, ObjectMeta, Phase, WorkerSpec
from jobd.api.wait_reasons import WaitReason
from jobd.controllers import transitions
from jobd.controllers.clock import FakeClock
from jobd.controllers.context import Context, Settings
from jobd.controllers.scheduler import SchedulerController
from jobd.controllers.verbs.admission import create_jobs
from jobd.controllers.verbs.arrays import create_array
from jobd.controllers.verbs.worker_lease import register_worker
from jobd.store.sql import SQLStore
from tests.integration.conftest import reread

pytestmark = pytest.mark.anyio


@pytest.fixture
def ctx(store: SQLStore) -> Context:
    return Context(store, Settings(), FakeClock())


def _reason(job: Job) -> str | None:
    said = [c for c in job.status.conditions if c.type == "Scheduled" and c.status == "False"]
    return said[0].reason if said else None


def _job(name: str, **spec: object) -> Job:
    return Job(metadata=ObjectMeta(name=name, project="p"), spec=JobSpec(command=["x"], **spec))


def _array(ctx: Context) -> list[Job]:
    array = JobArray(
        metadata=ArrayMeta(name="sweep", project="p"),
        spec=JobArraySpec(command=["x", "{i}"], array=ArraySpec(indices=[0, 1, 2], parallelism=1)),
    )
    create_array(ctx.store, array, ctx.clock)
    return sorted(ctx.store.list_jobs(name=None), key=lambda j: j.id)[-3:]


async def test_each_new_job_says_why_it_waits_and_the_scheduler_corrects_once(
    ctx: Context,
) -> None:
    register_worker(ctx, "w", WorkerSpec(slots=2), "host", "procgroup")
    parent, child = create_jobs(
        ctx.store, [_job("parent"), _job("child", depends_on=["parent"])], ctx.clock
    )
    # A job admitted ready says nothing yet: it waits for room (read as WaitingForCapacity,
    # cli/render.wait_reason), as a pod has no PodScheduled condition before its first try.
    assert (_reason(parent), _reason(child)) == (None, "WaitingForDependencies")
    members = _array(ctx)
    assert [_reason(m) for m in members] == [
        None,
        "ArrayParallelism",
        "ArrayParallelism",
    ]

    scheduler = SchedulerController(ctx)
    await scheduler.reconcile("queue")
    assert reread(ctx, parent).status.phase == Phase.SCHEDULED
    assert reread(ctx, members[0]).status.phase == Phase.SCHEDULED

    # A member said to wait for room while its array is at its cap (as a job back from a
    # lost worker would be): the pass that passes it over says why, once.
    stale, _ = transitions.wait_reason(
        reread(ctx, members[1]), WaitReason.WAITING_FOR_CAPACITY, "room", ctx.clock.now()
    )
    ctx.store.update_job(stale)
    ctx.store.update_job(*transitions.unbind(reread(ctx, parent), ctx.clock.now()))
    await scheduler.reconcile("queue")
    capped = reread(ctx, members[1])
    assert (capped.status.phase, _reason(capped)) == (Phase.PENDING, "ArrayParallelism")
    await scheduler.reconcile("queue")
    assert reread(ctx, members[1]).metadata.resource_version == capped.metadata.resource_version


def test_the_queue_ahead_of_a_job_is_counted_by_priority_then_age(ctx: Context) -> None:
    first, _, urgent, parent = create_jobs(
        ctx.store,
        [_job("first"), _job("second"), _job("urgent", priority=5), _job("parent")],
        ctx.clock,
    )
    create_jobs(ctx.store, [_job("child", depends_on=["parent"])], ctx.clock)  # not ready
    assert ctx.store.count_queued_ahead(0, first.id) == (1, 1), "urgent only"
    assert ctx.store.count_queued_ahead(0, parent.id) == (3, 1)
    assert ctx.store.count_queued_ahead(5, urgent.id) == (0, 0)
    last = create_jobs(ctx.store, [_job("last")], ctx.clock)[0]
    assert ctx.store.count_queued_ahead(0, last.id) == (4, 1), "the child is not queued"
