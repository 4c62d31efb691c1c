"""Workers' changes ask the loops that look at every worker for a pass a tenth of a second
later, gathered: a fleet registering at once makes one scheduling pass (and one look at
the queued jobs for placement), not one per worker; a job's change still asks at once.
On a real SQLite store, through the manager's own commit listener and work queues, on a
fake clock."""

from __future__ import annotations

import anyio
import pytest

from jobd.api.models import Job, JobSpec, ObjectMeta, WorkerSpec
from jobd.controllers.clock import FakeClock
from jobd.controllers.context import Context
from jobd.controllers.manager import Manager
from jobd.controllers.queueing import WorkQueue
from jobd.controllers.scheduler import QUEUE_KEY, SchedulerController
from jobd.controllers.verbs.admission import create_jobs
from jobd.controllers.verbs.worker_lease import register_worker

pytestmark = pytest.mark.anyio


async def _keys_due(queue: WorkQueue) -> list[str]:
    """The keys handed out now, each marked done (what the controller's task would run)."""
    keys = []
    while True:
        with anyio.move_on_after(0.05) as waited:
            key = await queue.get()
        if waited.cancelled_caught:
            return keys
        keys.append(key)
        queue.done(key)


async def test_fifty_registrations_ask_for_one_pass_after_a_tenth_of_a_second(
    ctx: Context,
) -> None:
    clock = ctx.clock
    assert isinstance(clock, FakeClock)
    manager = Manager(ctx)
    ctx.store.subscribe(manager.on_commit)
    scheduler, placement = manager.queues["scheduler"], manager.queues["placement"]
    wait = SchedulerController.worker_coalesce_s
    for i in range(50):
        register_worker(ctx, f"w{i:02d}", WorkerSpec(slots=1), "host", "sim")
    assert await _keys_due(scheduler) == [] and await _keys_due(placement) == []
    clock.advance(wait / 2)
    register_worker(ctx, "late", WorkerSpec(slots=1), "host", "sim")
    assert await _keys_due(scheduler) == [], "a later registration does not put it off"
    clock.advance(wait / 2)
    assert await _keys_due(scheduler) == [QUEUE_KEY], "one pass for the fifty-one"
    assert await _keys_due(placement) == ["*"], "one look at every queued job"


async def test_a_jobs_change_asks_for_its_pass_at_once(ctx: Context) -> None:
    clock = ctx.clock
    assert isinstance(clock, FakeClock)
    manager = Manager(ctx)
    ctx.store.subscribe(manager.on_commit)
    register_worker(ctx, "w", WorkerSpec(slots=1), "host", "sim")
    job = Job(metadata=ObjectMeta(name="j", project="p"), spec=JobSpec(command=["true"]))
    create_jobs(ctx.store, [job], ctx.clock)
    assert await _keys_due(manager.queues["scheduler"]) == [QUEUE_KEY], "the job did not wait"
