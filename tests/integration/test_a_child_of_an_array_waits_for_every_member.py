"""A job depending on an array (by `A<id>` or by name) has every member for a parent: it
waits while any runs, starts once all succeeded, and is cancelled (`dependency_failed`)
as soon as one member failed, unless `depends_on_any_exit`. A resumed member is a job of
its own that keeps the member's index."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from jobd.api.arrays import ArrayMeta, ArraySpec, JobArray, JobArraySpec
from jobd.api.models import Job, JobSpec, ObjectMeta, Phase, WorkerSpec
from jobd.controllers import lifecycle
from jobd.controllers.clock import FakeClock
from jobd.controllers.context import Context, Settings
from jobd.controllers.scheduler import SchedulerController
from jobd.controllers.verbs import arrays, reports
from jobd.controllers.verbs.admission import create_jobs
from jobd.controllers.verbs.preempt import request_preemption
from jobd.controllers.verbs.resume import resume_job
from jobd.controllers.verbs.worker_lease import register_worker
from jobd.store.sql import open_store
from tests.integration.conftest import reread

pytestmark = pytest.mark.anyio


@pytest.fixture
def ctx(tmp_path: Path) -> Iterator[Context]:
    store = open_store(f"sqlite:///{tmp_path}/jobd.db")
    context = Context(store, Settings(), FakeClock())
    register_worker(context, "w", WorkerSpec(slots=8), "host", "procgroup")
    yield context
    store.close()


def _array(ctx: Context, name: str, size: int) -> tuple[int, list[Job]]:
    spec = JobArraySpec(command=["true"], array=ArraySpec(indices=list(range(size))))
    array = JobArray(metadata=ArrayMeta(name=name), spec=spec)
    made = arrays.create_array(ctx.store, array, ctx.clock)
    return made.id, ctx.store.get_jobs(made.status.jobs)


def _child(ctx: Context, parent: str, *, any_exit: bool = False) -> Job:
    spec = JobSpec(command=["true"], depends_on=[parent], depends_on_any_exit=any_exit)
    return create_jobs(ctx.store, [Job(metadata=ObjectMeta(), spec=spec)], ctx.clock)[0]


async def _run_all(ctx: Context) -> None:
    await SchedulerController(ctx).reconcile("queue")
    for job in ctx.store.list_jobs(phases=[Phase.SCHEDULED]):
        reports.report_started(ctx, job, "w")


def _end(ctx: Context, job: Job, exit_code: int) -> None:
    reports.report_complete(ctx, reread(ctx, job), "w", exit_code, None)


async def _look(ctx: Context, job: Job) -> Job:
    await lifecycle.LifecycleController(ctx).reconcile(str(job.id))
    return reread(ctx, job)


async def test_the_child_starts_only_once_every_member_succeeded(ctx: Context) -> None:
    array_id, members = _array(ctx, "a", 3)
    by_id, by_name = _child(ctx, f"A{array_id}"), _child(ctx, "a")
    assert by_id.status.parents == by_name.status.parents == [j.id for j in members]
    await _run_all(ctx)
    for member in members[:2]:
        _end(ctx, member, 0)
    assert not (await _look(ctx, by_id)).status.dependencies_met
    _end(ctx, members[2], 0)
    assert (await _look(ctx, by_id)).status.dependencies_met
    assert (await _look(ctx, by_name)).status.dependencies_met


async def test_one_failed_member_cancels_the_child_unless_any_exit(ctx: Context) -> None:
    _, members = _array(ctx, "b", 2)
    child, patient = _child(ctx, "b"), _child(ctx, "b", any_exit=True)
    await _run_all(ctx)
    _end(ctx, members[0], 1)
    child = await _look(ctx, child)
    assert child.status.phase == Phase.CANCELLED and child.status.reason == "dependency_failed"
    assert not (await _look(ctx, patient)).status.dependencies_met
    _end(ctx, members[1], 0)
    assert (await _look(ctx, patient)).status.dependencies_met


async def test_a_resumed_member_keeps_its_index(ctx: Context) -> None:
    _, members = _array(ctx, "c", 2)
    await _run_all(ctx)
    member = request_preemption(ctx, reread(ctx, members[1]), "manual")
    member = reports.report_stopping(ctx, member, "w")
    reports.report_complete(ctx, member, "w", None, 15)
    resumed = resume_job(ctx, reread(ctx, member), from_scratch=True)
    assert resumed.metadata.array is None  # a job of its own, not a member
    assert resumed.spec.env["JOBD_ARRAY_INDEX"] == "1"
    assert resumed.metadata.labels["jobd/array"] == "c"
