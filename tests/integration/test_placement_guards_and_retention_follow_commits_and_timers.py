"""The placement, guards and retention loops on a real SQLite store and a fake clock.

Each loop is driven as the manager drives it: the keys its `keys_for` names for every
commit (and those it enqueues itself) are reconciled until none is left, and a
`requeue_after` is a timer the test runs out by advancing the clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

import httpx
import pytest

from jobd.api.models import Job, JobSpec, ObjectMeta, Phase, Resources, WorkerSpec
from jobd.controllers.clock import FakeClock
from jobd.controllers.context import Context
from jobd.controllers.guards import GuardsController
from jobd.controllers.placement import PlacementController
from jobd.controllers.queueing import Reconciler
from jobd.controllers.retention import RetentionController
from jobd.controllers.scheduler import SchedulerController
from jobd.controllers.verbs import reports
from jobd.controllers.verbs.admission import create_jobs
from jobd.controllers.verbs.worker_lease import register_worker
from jobd.store.base import Change, EventRecord
from tests.integration.conftest import job_document, reread

pytestmark = pytest.mark.anyio


class Driven:
    """A controller fed the keys of every commit, as the manager feeds it."""

    def __init__(self, ctx: Context, controller: Reconciler) -> None:
        self.controller, self.keys = controller, list[str]()
        ctx.enqueue = lambda _name, key: self.keys.append(key)
        ctx.store.subscribe(self._heard)

    def _heard(self, changes: Sequence[Change], _events: Sequence[EventRecord]) -> None:
        for change in changes:
            self.keys.extend(self.controller.keys_for(change))

    async def run(self) -> dict[str, float]:
        """Reconcile until no key is left; the timers asked for, by key."""
        timers: dict[str, float] = {}
        while self.keys:
            key = self.keys.pop(0)
            result = await self.controller.reconcile(key)
            if result.requeue_after is not None:
                timers[key] = result.requeue_after
        return timers


def _submit(ctx: Context, name: str, **spec: object) -> Job:
    job = Job(metadata=ObjectMeta(name=name, project="p"), spec=JobSpec(command=["x"], **spec))
    return create_jobs(ctx.store, [job], ctx.clock)[0]


# What a queued job says while no verdict keeps it out (api/wait_reasons.py).
WAITS = ("False", "WaitingForCapacity", "waiting for a worker with room")


def _scheduled(job: Job) -> tuple[str, str, str] | None:
    found = [c for c in job.status.conditions if c.type == "Scheduled"]
    return (found[0].status, found[0].reason, found[0].message) if found else None


async def test_unschedulable_is_said_then_cleared_when_a_big_enough_worker_joins(
    ctx: Context,
) -> None:
    register_worker(ctx, "small", WorkerSpec(slots=4, gpus=[0, 1]), "host", "procgroup")
    placement = Driven(ctx, PlacementController(ctx))
    await placement.run()
    big = _submit(ctx, "big", resources=Resources(gpus=4))
    fits = _submit(ctx, "fits", resources=Resources(gpus=2))
    await placement.run()
    message = "no worker has 4 GPUs; the largest has 2"
    assert _scheduled(reread(ctx, big)) == ("False", "Unschedulable", message)
    assert _scheduled(reread(ctx, fits)) is None  # admitted ready: waits for room, unsaid
    assert [e.job for e in ctx.store.list_events(event="job_unschedulable")] == [big.id]

    register_worker(ctx, "large", WorkerSpec(slots=8, gpus=[0, 1, 2, 3]), "host", "procgroup")
    await placement.run()
    assert _scheduled(reread(ctx, big)) == WAITS, "a worker that could run it joined"
    assert len(ctx.store.list_events(event="job_unschedulable")) == 1


async def test_a_job_queued_before_any_worker_is_judged_when_the_first_registers(
    ctx: Context,
) -> None:
    placement = Driven(ctx, PlacementController(ctx))
    big = _submit(ctx, "big", resources=Resources(gpus=3))
    await placement.run()
    assert _scheduled(reread(ctx, big)) is None, "no worker yet: nothing is said"
    register_worker(ctx, "w", WorkerSpec(slots=1), "host", "procgroup")
    await placement.run()
    assert _scheduled(reread(ctx, big)) == (
        "False",
        "Unschedulable",
        "no worker has 3 GPUs; the largest has 0",
    )


async def test_max_pending_sleeps_until_its_deadline_then_fails_the_job(ctx: Context) -> None:
    assert isinstance(ctx.clock, FakeClock)
    guards = Driven(ctx, GuardsController(ctx))
    job = _submit(ctx, "queued", max_pending_s=60, resources=Resources(gpus=1))
    assert await guards.run() == {str(job.id): 60.0}
    ctx.clock.advance(59)
    guards.keys.append(str(job.id))
    assert await guards.run() == {str(job.id): 1.0}
    ctx.clock.advance(1)
    guards.keys.append(str(job.id))
    await guards.run()
    ended = reread(ctx, job)
    assert (ended.status.phase, ended.status.reason) == (Phase.FAILED, "PendingTimeout")
    events = [e.event for e in ctx.store.list_events(job=job.id)]
    assert events[-2:] == ["job_timed_out", "job_finished"]


async def test_max_runtime_asks_the_worker_to_stop_and_the_end_stays_failed(
    ctx: Context,
) -> None:
    assert isinstance(ctx.clock, FakeClock)
    register_worker(ctx, "w", WorkerSpec(slots=1), "host", "procgroup")
    guards = Driven(ctx, GuardsController(ctx))
    job = _submit(ctx, "train", max_runtime_s=3600)
    await SchedulerController(ctx).reconcile("queue")
    running = reports.report_started(ctx, reread(ctx, job), "w")
    assert await guards.run() == {str(job.id): 3600.0}
    ctx.clock.advance(3600)
    guards.keys.append(str(job.id))
    await guards.run()
    stopping = reread(ctx, running)
    assert (stopping.status.phase, stopping.status.signal) == (Phase.RUNNING, "timeout")
    assert stopping.status.desired_phase == Phase.FAILED
    stopping = reports.report_stopping(ctx, stopping, "w")
    ended = reports.report_complete(ctx, stopping, "w", None, 15)
    assert (ended.status.phase, ended.status.reason) == (Phase.FAILED, "MaxRuntimeExceeded")
    assert [e.fields["reason"] for e in ctx.store.list_events(event="job_timed_out")] == [
        "MaxRuntimeExceeded"
    ]


async def test_retention_waits_for_the_ttl_and_for_a_child_still_to_be_judged(
    ctx: Context,
) -> None:
    assert isinstance(ctx.clock, FakeClock)
    register_worker(ctx, "w", WorkerSpec(slots=1), "host", "procgroup")
    retention = Driven(ctx, RetentionController(ctx))
    parent = _submit(ctx, "prep", ttl_after_finished_s=10)
    _submit(ctx, "train", depends_on=["prep"])
    await SchedulerController(ctx).reconcile("queue")
    started = reports.report_started(ctx, reread(ctx, parent), "w")
    reports.report_complete(ctx, started, "w", 0, None)
    assert await retention.run() == {str(parent.id): 10.0}
    ctx.clock.advance(10)
    retention.keys.append(str(parent.id))
    assert await retention.run() == {str(parent.id): 60.0}, "its child waits on it"
    assert ctx.store.get_job(parent.id) is not None

    ctx.view.parents.discard(parent.id)  # as if the child had been judged and had run
    retention.keys.append(str(parent.id))
    await retention.run()
    assert ctx.store.get_job(parent.id) is None
    assert [e.event for e in ctx.store.list_events(job=parent.id)] == ["job_expired"]


async def test_the_brokers_default_ttl_applies_to_a_job_that_says_none(ctx: Context) -> None:
    assert isinstance(ctx.clock, FakeClock)
    ctx.settings.finished_job_ttl_s = 30.0
    retention = Driven(ctx, RetentionController(ctx))
    job = _submit(ctx, "queued", resources=Resources(gpus=1), max_pending_s=1)
    ended = reread(ctx, job).evolve()
    ended.status.phase = ended.status.desired_phase = Phase.CANCELLED
    ended.status.finished_at = ctx.clock.now() - timedelta(seconds=40)
    ctx.store.update_job(ended)
    await retention.run()
    assert ctx.store.get_job(job.id) is None
    (expired,) = ctx.store.list_events(event="job_expired")
    assert expired.fields == {"phase": "Cancelled", "ttl_s": 30.0, "name": "p/queued"}


@pytest.mark.parametrize("field", ["max_runtime_s", "idle_timeout_s", "ttl_after_finished_s"])
async def test_a_limit_that_is_no_positive_whole_number_is_refused_naming_it(
    api: httpx.AsyncClient, field: str
) -> None:
    for bad in (0, True, 2.5):
        resp = await api.post("/jobs", json=job_document("bad", **{field: bad}))
        assert resp.status_code == 422, resp.text
        assert resp.json()["detail"].startswith(f"spec.{field}:")
    resp = await api.post("/jobs", json=job_document("good", **{field: 7200}))
    assert resp.status_code == 201
    assert resp.json()["status"]["effective"][field] == 7200
