"""Creates that arrive together share one commit; one refused create fails alone.

A batch refused as a whole (here: a name already taken) is retried a create at a time,
so the good creates still land, with the names and settings of a first attempt.
"""

from __future__ import annotations

import anyio
import pytest

from jobd.api.models import Job, JobSpec, JobStatus, ObjectMeta, Phase
from jobd.broker.batching import CreateBatcher
from jobd.controllers.context import Context
from jobd.controllers.verbs.admission import prepare_new_job
from jobd.store.base import Conflict

pytestmark = pytest.mark.anyio


def _job(name: str | None = None) -> Job:
    return Job(metadata=ObjectMeta(name=name), spec=JobSpec(command=["true"], priority=7))


async def test_a_refused_create_leaves_the_others_of_its_batch_created(ctx: Context) -> None:
    batcher = CreateBatcher(ctx)
    await batcher.create(_job("taken"))
    results: dict[str, Job | Exception] = {}

    async def create(key: str, job: Job) -> None:
        try:
            results[key] = await batcher.create(job)
        except Conflict as exc:
            results[key] = exc

    async with anyio.create_task_group() as tg:  # one turn of the loop: one batch
        tg.start_soon(create, "named", _job("fresh"))
        tg.start_soon(create, "dup", _job("taken"))
        tg.start_soon(create, "unnamed", _job())  # retried alone, it gets another id

    assert isinstance(results["dup"], Conflict)
    unnamed, named = results["unnamed"], results["named"]
    assert isinstance(unnamed, Job) and isinstance(named, Job)
    assert unnamed.metadata.name == f"job-{unnamed.id}"
    assert ctx.store.get_job_by_name("default", f"job-{unnamed.id}") == unnamed
    assert named.status.effective.priority == 7 and named.metadata.generation == 1
    names = {j.metadata.name for j in ctx.store.list_jobs()}
    assert names == {"taken", "fresh", f"job-{unnamed.id}"}


def test_preparing_a_job_again_gives_the_same(ctx: Context) -> None:
    job = _job("again")
    first = prepare_new_job(job, None, ctx.clock, [3]).model_dump()
    second = prepare_new_job(job, None, ctx.clock, [3]).model_dump()
    assert first == second
    assert [(c.type, c.reason) for c in job.status.conditions] == [
        ("DependenciesMet", "Waiting"),
        ("Scheduled", "WaitingForDependencies"),
    ]


def test_a_status_sent_with_a_new_job_is_replaced(ctx: Context) -> None:
    sent = JobStatus(phase=Phase.SUCCEEDED, worker="elsewhere", exit_code=0)
    job = Job(metadata=ObjectMeta(name="s", id=99, uid="x"), spec=JobSpec(command=["true"]))
    job.status = sent
    prepared = prepare_new_job(job, None, ctx.clock, [])
    assert prepared.status.phase == Phase.PENDING and prepared.status.worker is None
    assert prepared.status.exit_code is None and prepared.status.dependencies_met
    assert prepared.metadata.id is None and prepared.metadata.uid is None
