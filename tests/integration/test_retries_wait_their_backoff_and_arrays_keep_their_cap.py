"""Retries and array caps on a real SQLite store, the scheduler and a fake clock.

A failed attempt of a job with `spec.retry` is back in Pending but out of the queue
until its backoff is over (the retries loop's timer), then bound again as its next
attempt; a broker started anew on the same store finds the timer again. An array with
`parallelism: 2` never has more than two members bound, however many slots are free.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from jobd.api.arrays import ArrayMeta, ArraySpec, JobArray, JobArraySpec
from jobd.api.models import Job, JobSpec, ObjectMeta, Phase, RetryPolicy, WorkerSpec
from jobd.controllers.clock import FakeClock
from jobd.controllers.context import Context, Settings
from jobd.controllers.retries import RetriesController
from jobd.controllers.scheduler import SchedulerController
from jobd.controllers.verbs import reports
from jobd.controllers.verbs.admission import create_jobs
from jobd.controllers.verbs.arrays import create_array
from jobd.controllers.verbs.worker_lease import register_worker
from jobd.store.sql import SQLStore, open_store
from tests.integration.conftest import broker_state, job_document, reread

pytestmark = pytest.mark.anyio


@pytest.fixture
def ctx(store: SQLStore) -> Context:
    """On SQLite and on PostgreSQL (tests/conftest.py `store`)."""
    return Context(store, Settings(), FakeClock())


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


async def test_a_broker_started_anew_finds_the_backoff_timer(ctx: Context, store_url: str) -> None:
    register_worker(ctx, "w", WorkerSpec(slots=1), "host", "procgroup")
    spec = JobSpec(command=["x"], retry=RetryPolicy(limit=1, backoff_s=30))
    job = create_jobs(
        ctx.store, [Job(metadata=ObjectMeta(name="r", project="p"), spec=spec)], ctx.clock
    )[0]
    await _schedule(ctx)
    _fail(ctx, job)
    again = open_store(store_url)
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


async def test_a_full_array_keeps_no_job_behind_it_waiting(ctx: Context) -> None:
    # More queued members than a pass reads (128): the pass steps over the full array's
    # members in one read instead of reading them all, and reaches the job behind.
    register_worker(ctx, "w", WorkerSpec(slots=4), "host", "procgroup")
    array = JobArray(
        metadata=ArrayMeta(name="big", project="p"),
        spec=JobArraySpec(command=["x"], array=ArraySpec(indices=list(range(300)), parallelism=1)),
    )
    create_array(ctx.store, array, ctx.clock)
    behind = Job(metadata=ObjectMeta(name="behind", project="p"), spec=JobSpec(command=["x"]))
    behind = create_jobs(ctx.store, [behind], ctx.clock)[0]
    await _schedule(ctx)
    bound = ctx.store.list_jobs(phases=[Phase.SCHEDULED])
    assert sorted(j.metadata.name or "" for j in bound) == ["behind", "big-0"]


@pytest.mark.parametrize(
    ("retry", "field"),
    [
        ({"limit": -1}, "spec.retry.limit"),
        ({"limit": 10**30}, "spec.retry.limit"),
        ({"limit": 1, "backoff_s": -5}, "spec.retry.backoff_s"),
        ({"limit": 1, "backoff_max_s": 1e300}, "spec.retry.backoff_max_s"),
        ({"limit": 1, "on_exit_codes": [-1]}, "spec.retry.on_exit_codes"),
        ({"limit": 1, "on_exit_codes": list(range(257))}, "spec.retry.on_exit_codes"),
        ({"limit": 1, "on_lost": "sometimes"}, "spec.retry.on_lost"),
    ],
)
async def test_hostile_retry_policies_get_422_naming_the_field(
    api: httpx.AsyncClient, retry: dict[str, Any], field: str
) -> None:
    answer = await api.post("/jobs", json=job_document("hostile", retry=retry))
    assert answer.status_code == 422, answer.text
    assert answer.json()["detail"].startswith(f"{field}"), answer.text
    assert broker_state(api).store.list_jobs() == []


@pytest.mark.parametrize("parallelism", [0, -1, 10**30, "2"])
async def test_a_hostile_array_cap_gets_422_naming_the_field(
    api: httpx.AsyncClient, parallelism: object
) -> None:
    array = {"indices": [0, 1], "parallelism": parallelism}
    document = {
        "apiVersion": "jobd/v1",
        "kind": "JobArray",
        "metadata": {"name": "capped"},
        "spec": {"command": ["true"], "array": array},
    }
    answer = await api.post("/arrays", json=document)
    assert answer.status_code == 422 and "spec.array.parallelism" in answer.text, answer.text


async def test_the_openapi_document_bounds_the_new_fields(api: httpx.AsyncClient) -> None:
    schemas = (await api.get("/openapi.json")).json()["components"]["schemas"]
    retry = schemas["RetryPolicy"]["properties"]
    assert (retry["limit"]["minimum"], retry["limit"]["maximum"]) == (0, 100)
    assert retry["backoff_s"]["maximum"] == retry["backoff_max_s"]["maximum"] == 86400
    codes = retry["on_exit_codes"]["anyOf"][0]
    assert codes["maxItems"] == 256 and codes["items"]["maximum"] == 255
    cap = schemas["ArraySpec"]["properties"]["parallelism"]["anyOf"][0]
    assert (cap["minimum"], cap["maximum"]) == (1, 10_000)
