"""Cordon and drain at the controller level, on a real SQLite store and a fake clock.

A cordoned worker is offered no room: the scheduler binds nothing there, and neither the
sweeper nor `preempt-blockers` preempts anything there for a queued job. What runs there
goes on. The cordon is part of the stored Worker, so it outlives the worker's
re-registration and a broker restart (a fresh Context on the same store).
"""

from __future__ import annotations

import pytest

from jobd.api.models import Job, JobSpec, ObjectMeta, Phase, WorkerSpec
from jobd.controllers.clock import FakeClock
from jobd.controllers.context import Context
from jobd.controllers.errors import TransitionError
from jobd.controllers.scheduler import SchedulerController
from jobd.controllers.sweeper import SweeperController
from jobd.controllers.verbs import drain, reports
from jobd.controllers.verbs.admission import create_jobs
from jobd.controllers.verbs.preempt import nominate, preempt_blockers
from jobd.controllers.verbs.worker_lease import register_worker
from jobd.store.base import NotFound
from tests.integration.conftest import reread

pytestmark = pytest.mark.anyio


def _submit(ctx: Context, name: str, priority: int = 1, preemptible: bool = False) -> Job:
    spec = JobSpec(command=["true"], priority=priority, preemptible=preemptible)
    job = Job(metadata=ObjectMeta(name=name, project="p"), spec=spec)
    return create_jobs(ctx.store, [job], ctx.clock)[0]


async def _schedule(ctx: Context) -> None:
    await SchedulerController(ctx).reconcile("queue")


async def _running_on(ctx: Context, worker: str, name: str, preemptible: bool = False) -> Job:
    """A job running on `worker`, the only uncordoned worker while it is placed."""
    others = [w for w in ctx.store.list_workers() if w.name != worker and not w.spec.cordoned]
    for other in others:
        drain.cordon(ctx, other.name)
    job = _submit(ctx, name, preemptible=preemptible)
    await _schedule(ctx)
    bound = reread(ctx, job)
    assert bound.status.worker == worker
    for other in others:
        drain.cordon(ctx, other.name, False)
    return reports.report_started(ctx, bound, worker)


async def test_nothing_is_bound_to_a_cordoned_worker_until_uncordoned(ctx: Context) -> None:
    register_worker(ctx, "w1", WorkerSpec(slots=2), "host", "procgroup")
    running = await _running_on(ctx, "w1", "running")
    worker = drain.cordon(ctx, "w1")
    assert worker.spec.cordoned
    queued = _submit(ctx, "queued")
    await _schedule(ctx)
    assert reread(ctx, queued).status.phase == Phase.PENDING
    assert reread(ctx, running).status.phase == Phase.RUNNING  # what runs there goes on

    drain.cordon(ctx, "w1", False)
    await _schedule(ctx)
    assert reread(ctx, queued).status.worker == "w1"
    events = [(e.event, e.worker, e.fields) for e in ctx.store.list_events()]
    assert ("worker_cordoned", "w1", {"jobs": [running.id]}) in events
    assert ("worker_uncordoned", "w1", {}) in events


async def test_cordoning_twice_writes_once(ctx: Context) -> None:
    register_worker(ctx, "w1", WorkerSpec(slots=1), "host", "procgroup")
    first = drain.cordon(ctx, "w1")
    again = drain.cordon(ctx, "w1")
    assert again.metadata.resource_version == first.metadata.resource_version
    assert len(ctx.store.list_events(event="worker_cordoned")) == 1


async def test_the_cordon_outlives_re_registration_and_a_broker_restart(ctx: Context) -> None:
    register_worker(ctx, "w1", WorkerSpec(slots=1), "host", "procgroup")
    drain.cordon(ctx, "w1")
    register_worker(ctx, "w1", WorkerSpec(slots=4, gpus=[0]), "host", "procgroup")
    restarted = Context(ctx.store, ctx.settings, ctx.clock)
    worker = restarted.store.get_worker("w1")
    assert worker is not None
    assert worker.spec.cordoned and worker.spec.slots == 4  # the worker's say, and the user's
    queued = _submit(restarted, "queued")
    await _schedule(restarted)
    assert reread(restarted, queued).status.phase == Phase.PENDING


async def test_no_preemption_makes_room_on_a_cordoned_worker(ctx: Context) -> None:
    register_worker(ctx, "w1", WorkerSpec(slots=1), "host", "procgroup")
    victim = await _running_on(ctx, "w1", "low", preemptible=True)
    drain.cordon(ctx, "w1")
    urgent = _submit(ctx, "urgent", priority=50)
    with pytest.raises(TransitionError):
        preempt_blockers(ctx, urgent, dry_run=True)
    # The sweeper, with every threshold passed, leaves the victim alone too.
    assert isinstance(ctx.clock, FakeClock)
    ctx.clock.advance(3600)
    await SweeperController(ctx).reconcile("sweep")
    assert reread(ctx, victim).status.desired_phase == Phase.RUNNING
    assert ctx.store.list_events(event="auto_preempt") == []


async def test_cordoning_releases_capacity_held_there_for_a_queued_job(ctx: Context) -> None:
    register_worker(ctx, "w1", WorkerSpec(slots=1), "host", "procgroup")
    register_worker(ctx, "w2", WorkerSpec(slots=1), "host", "procgroup")
    await _running_on(ctx, "w2", "busy")
    await _running_on(ctx, "w1", "low", preemptible=True)
    queued = _submit(ctx, "queued", priority=50)
    nominate(ctx, queued, "w1")
    drain.cordon(ctx, "w1")
    assert reread(ctx, queued).status.nominated_worker is None


async def test_drain_preempts_only_preemptible_running_jobs_once(ctx: Context) -> None:
    register_worker(ctx, "w1", WorkerSpec(slots=2), "host", "procgroup")
    soft = await _running_on(ctx, "w1", "soft", preemptible=True)
    hard = await _running_on(ctx, "w1", "hard")
    first = drain.drain(ctx, "w1", preempt=True)
    assert [j.id for j in first.preempted] == [soft.id]
    assert sorted(j.id for j in first.remaining) == sorted([soft.id, hard.id])
    assert first.worker.spec.cordoned
    again = drain.drain(ctx, "w1", preempt=True)  # as `job drain` asks while it waits
    assert again.preempted == []
    [event] = ctx.store.list_events(event="auto_preempt")
    assert (event.job, event.fields["reason"]) == (soft.id, "drain")
    assert reread(ctx, hard).status.desired_phase == Phase.RUNNING


async def test_drain_without_preempt_preempts_nothing(ctx: Context) -> None:
    register_worker(ctx, "w1", WorkerSpec(slots=1), "host", "procgroup")
    soft = await _running_on(ctx, "w1", "soft", preemptible=True)
    result = drain.drain(ctx, "w1", preempt=False)
    assert result.preempted == [] and [j.id for j in result.remaining] == [soft.id]


async def test_an_unknown_worker_is_not_found(ctx: Context) -> None:
    with pytest.raises(NotFound, match="worker nope is not registered"):
        drain.cordon(ctx, "nope")
