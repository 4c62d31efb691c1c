"""Retries and array caps on a real SQLite store, the scheduler and a fake clock.

A failed attempt of a job with `spec.retry` is back in Pending but out of the queue
until its backoff is over (the retries loop's timer), then bound again as its next
attempt; a broker started anew on the same store finds the timer again. An array with
`parallelism: 2` never has more than two members bound, however many slots are free.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from jobd.api.arrays import ArrayMeta, ArraySpec, JobArray, JobArraySpec
from jobd.api.models import Job, JobSpec, ObjectMeta, Phase, RetryPolicy, WorkerSpec
from jobd.controllers.clock import FakeClock
from jobd.controllers.context import Context
from jobd.controllers.retries import RetriesController
from jobd.controllers.scheduler import SchedulerController
from jobd.controllers.verbs import reports
from jobd.controllers.verbs.admission import create_jobs
from jobd.controllers.verbs.arrays import create_array
from jobd.controllers.verbs.worker_lease import register_worker
from jobd.store.sql import open_store
from tests.integration.conftest import reread

pytestmark = pytest.mark.anyio


async def _schedule(ctx: Context) -> None:
    await SchedulerController(ctx).reconcile("queue")


def _fail(ctx: Context, job: Job, exit_code: int = 1) -> Job:
    job = reread(ctx, job)
    worker = job.status.worker or ""
    job = reports.report_started(ctx, job, worker, job.status.attempt)
    return reports.report_complete(ctx, job, worker, exit_code, None, job.status.attempt)


async def test_a_failed_attempt_waits_out_its_backoff_then_runs_again(ctx: Context) -> None:
    register_worker(ctx, "w", WorkerSpec(slots=4), "host", "procgroup")
    spec = JobSpec(command=["x"], retry=RetryPolicy(limit=2, backoff_s=5, backoff_max_s=8))
    job = create_jobs(
        ctx.store, [Job(metadata=ObjectMeta(name="r", project="p"), spec=spec)], ctx.clock
    )[0]
    retries = RetriesController(ctx)
    waits = []
    for attempt in (1, 2, 3):
        await _schedule(ctx)
        job = reread(ctx, job)
        assert (job.status.phase, job.status.attempt) == (Phase.SCHEDULED, attempt)
        job = _fail(ctx, job)
        if attempt == 3:
            break
        assert job.status.phase == Phase.PENDING and job.status.retry_at is not None
        await _schedule(ctx)  # out of the queue meanwhile
        assert reread(ctx, job).status.phase == Phase.PENDING
        wait = (await retries.reconcile(str(job.id))).requeue_after
        assert wait is not None
        waits.append(wait)
        assert isinstance(ctx.clock, FakeClock)
        ctx.clock.advance(wait)
        await retries.reconcile(str(job.id))
    assert waits == [5.0, 8.0]
    final = reread(ctx, job)
    assert final.status.phase == Phase.FAILED
    assert [a.attempt for a in final.status.attempts] == [1, 2, 3]
    retrying = ctx.store.list_events(event="job_retrying")
    assert [(e.fields["attempt"], e.fields["wait_s"]) for e in retrying] == [(2, 5.0), (3, 8.0)]


async def test_a_broker_started_anew_finds_the_backoff_timer(ctx: Context, tmp_path: Path) -> None:
    register_worker(ctx, "w", WorkerSpec(slots=1), "host", "procgroup")
    spec = JobSpec(command=["x"], retry=RetryPolicy(limit=1, backoff_s=30))
    job = create_jobs(
        ctx.store, [Job(metadata=ObjectMeta(name="r", project="p"), spec=spec)], ctx.clock
    )[0]
    await _schedule(ctx)
    _fail(ctx, job)
    again = open_store(f"sqlite:///{tmp_path}/jobd.db")
    try:
        fresh = Context(again, ctx.settings, ctx.clock)
        retries = RetriesController(fresh)
        assert list(retries.keys_all()) == [str(job.id)]
        assert (await retries.reconcile(str(job.id))).requeue_after == pytest.approx(30)
    finally:
        again.close()


async def test_an_array_never_has_more_members_bound_than_its_parallelism(ctx: Context) -> None:
    register_worker(ctx, "w", WorkerSpec(slots=8), "host", "procgroup")
    array = JobArray(
        metadata=ArrayMeta(name="a", project="p"),
        spec=JobArraySpec(
            command=["x", "{i}"], array=ArraySpec.model_validate({"indices": "0-5%2"})
        ),
    )
    created = create_array(ctx.store, array, ctx.clock)
    assert created.spec.array.parallelism == 2
    ended = 0
    while ended < 6:
        await _schedule(ctx)
        bound = ctx.store.list_jobs(phases=[Phase.SCHEDULED])
        assert len(bound) == min(2, 6 - ended)
        _fail(ctx, bound[0], exit_code=0)
        ended += 1
    assert len(ctx.store.list_jobs(phases=[Phase.SUCCEEDED])) == 6
