"""A gang's member workers under the lease rules single jobs have, and `job resume` of one.

One member's worker expiring makes the whole gang Lost; the other worker's heartbeats do
not bring it back while that worker is Lost, its own return does; a Lost gang whose worker
never returns fails at the lost timeout. A member that ended on its worker while the
others run is not "vanished" when that worker no longer lists it. A preempted gang resumes
as a gang, each rank pointed at the checkpoint its member left. Real SQLite, the
controllers' verbs, an injected clock.
"""

from __future__ import annotations

import pytest

from jobd.api.models import Job, JobSpec, ObjectMeta, Phase, WorkerSpec
from jobd.controllers import lifecycle
from jobd.controllers.context import Context
from jobd.controllers.verbs import reports
from jobd.controllers.verbs.admission import create_jobs
from jobd.controllers.verbs.preempt import request_preemption
from jobd.controllers.verbs.resume import resume_job
from jobd.controllers.verbs.worker_lease import heartbeat, register_worker
from jobd.controllers.workers import WorkersController
from tests.gang_binding import bind_gang
from tests.integration import test_worker_lease_expiry_and_return as lease_tests
from tests.integration.conftest import reread

pytestmark = pytest.mark.anyio

# The lease tests' store, settings and clock (lease 15 s, lost timeout 60 s).
ctx = lease_tests.ctx
LEASE_S, LOST_TIMEOUT_S = lease_tests.LEASE_S, lease_tests.LOST_TIMEOUT_S
_clock = lease_tests._clock


def _running_gang(ctx: Context) -> Job:
    """Workers a and b registered; a gang of 2 bound to them, both members started."""
    for name in ("a", "b"):
        register_worker(ctx, name, WorkerSpec(slots=1, lease_duration_s=LEASE_S), name, "pg")
    spec = JobSpec(command=["true"], nodes=2)
    job = create_jobs(ctx.store, [Job(metadata=ObjectMeta(name="g"), spec=spec)], ctx.clock)[0]
    placements = [("a", None, []), ("b", None, [])]
    job = ctx.store.update_job(*bind_gang(job, placements, ctx.clock.now()))
    for rank, worker in enumerate(("a", "b")):
        job = reports.report_started(ctx, job, worker, job.status.attempt, rank)
    assert job.status.phase == Phase.RUNNING
    return job


async def test_a_lost_member_worker_makes_the_gang_lost_until_it_returns(ctx: Context) -> None:
    job = _running_gang(ctx)
    _clock(ctx).advance(LEASE_S + 1)
    heartbeat(ctx, "a", [job.id], {job.id: job.status.attempt})
    await WorkersController(ctx).reconcile("b")
    assert reread(ctx, job).status.phase == Phase.LOST

    _, stop = heartbeat(ctx, "a", [job.id], {job.id: job.status.attempt})
    assert stop == [] and reread(ctx, job).status.phase == Phase.LOST, "b is still Lost"

    _, stop = heartbeat(ctx, "b", [job.id], {job.id: job.status.attempt})
    assert stop == []
    back = reread(ctx, job)
    assert back.status.phase == Phase.RUNNING
    assert [e.event for e in ctx.store.list_events(job=job.id)][-1] == "job_recovered"


async def test_a_lost_gang_whose_worker_never_returns_fails_at_the_lost_timeout(
    ctx: Context,
) -> None:
    job = _running_gang(ctx)
    _clock(ctx).advance(LEASE_S + 1)
    heartbeat(ctx, "a", [job.id], {job.id: job.status.attempt})
    await WorkersController(ctx).reconcile("b")
    _clock(ctx).advance(LOST_TIMEOUT_S + 1)
    await lifecycle.LifecycleController(ctx).reconcile(str(job.id))
    ended = reread(ctx, job)
    assert ended.status.phase == Phase.FAILED and ended.status.reason == "worker_lost"


async def test_a_member_ended_on_its_worker_is_not_vanished_while_the_others_run(
    ctx: Context,
) -> None:
    job = _running_gang(ctx)
    job = reports.report_complete(ctx, job, "b", 0, None, job.status.attempt, None, (1, None))
    _clock(ctx).advance(10)
    heartbeat(ctx, "a", [job.id], {job.id: job.status.attempt})
    _, stop = heartbeat(ctx, "b", [], {})
    assert stop == [] and reread(ctx, job).status.phase == Phase.RUNNING
    assert reread(ctx, job).status.members[1].phase == Phase.SUCCEEDED


async def test_a_preempted_gang_resumes_as_a_gang_each_rank_from_its_checkpoint(
    ctx: Context,
) -> None:
    job = _running_gang(ctx)
    job = request_preemption(ctx, job, "manual")
    for rank, worker in enumerate(("a", "b")):
        job = reports.record_checkpoint_complete(ctx, job, worker, job.status.attempt, rank)
    for rank, worker in enumerate(("a", "b")):
        latest = f"/ck/{rank}/latest.pt"
        member = (rank, latest)
        job = reports.report_complete(ctx, job, worker, 0, None, job.status.attempt, None, member)
    assert job.status.phase == Phase.PREEMPTED
    resumed = resume_job(ctx, job)
    assert resumed.spec.nodes == 2
    env = resumed.spec.env
    assert env["RESUME_FROM"] == "/ck/0/latest.pt"
    assert (env["RESUME_FROM_RANK_0"], env["RESUME_FROM_RANK_1"]) == (
        "/ck/0/latest.pt",
        "/ck/1/latest.pt",
    )
