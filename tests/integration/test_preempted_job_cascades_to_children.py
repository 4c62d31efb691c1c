"""A parent that ends badly cancels its children, transitively; `depends_on_any_exit` opts out."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from jobd.api.models import Job, JobSpec, ObjectMeta, Phase, WorkerSpec
from jobd.controllers import lifecycle
from jobd.controllers.clock import FakeClock
from jobd.controllers.context import Context, Settings
from jobd.controllers.scheduler import SchedulerController
from jobd.controllers.verbs import reports
from jobd.controllers.verbs.admission import create_jobs
from jobd.controllers.verbs.cancel import cancel
from jobd.controllers.verbs.preempt import request_preemption
from jobd.controllers.verbs.worker_lease import register_worker
from jobd.store.sql import open_store
from tests.integration.conftest import reread

pytestmark = pytest.mark.anyio


@pytest.fixture
def ctx(tmp_path: Path) -> Iterator[Context]:
    store = open_store(f"sqlite:///{tmp_path}/jobd.db")
    context = Context(store, Settings(), FakeClock())
    register_worker(context, "w", WorkerSpec(slots=4), "host", "procgroup")
    yield context
    store.close()


def _submit(ctx: Context, name: str, *parents: str, any_exit: bool = False) -> Job:
    job = Job(
        metadata=ObjectMeta(name=name, project="p"),
        spec=JobSpec(command=["true"], depends_on=list(parents), depends_on_any_exit=any_exit),
    )
    return create_jobs(ctx.store, [job], ctx.clock)[0]


async def _start(ctx: Context, job: Job) -> Job:
    await SchedulerController(ctx).reconcile("queue")
    return reports.report_started(ctx, reread(ctx, job), "w")


async def _end(ctx: Context, job: Job, how: Phase) -> None:
    """Run `job` and end it as `how`: Succeeded, Failed, Preempted or Cancelled."""
    job = await _start(ctx, job)
    if how == Phase.PREEMPTED:
        job = request_preemption(ctx, job, "manual")
        job = reports.report_stopping(ctx, job, "w")
        reports.report_complete(ctx, job, "w", None, 15)
    elif how == Phase.CANCELLED:
        job = cancel(ctx, job)
        reports.report_complete(ctx, job, "w", None, 15)
    else:
        reports.report_complete(ctx, job, "w", 0 if how == Phase.SUCCEEDED else 1, None)
    assert reread(ctx, job).status.phase == how


async def _reconcile(ctx: Context, job: Job) -> Job:
    await lifecycle.LifecycleController(ctx).reconcile(str(job.id))
    return reread(ctx, job)


def _cancel_reasons(ctx: Context, job: Job) -> list[object]:
    return [
        e.fields.get("reason") for e in ctx.store.list_events(job=job.id, event="job_cancelled")
    ]


async def test_a_preempted_parent_cancels_child_and_grandchild(ctx: Context) -> None:
    parent = _submit(ctx, "parent")
    child = _submit(ctx, "child", "parent")
    grandchild = _submit(ctx, "grandchild", "child")
    await _end(ctx, parent, Phase.PREEMPTED)

    # Still waiting until its own key is looked at: the cascade runs through the queue.
    assert (await _reconcile(ctx, grandchild)).status.phase == Phase.PENDING
    child = await _reconcile(ctx, child)
    assert child.status.phase == Phase.CANCELLED
    assert child.status.desired_phase == Phase.CANCELLED
    assert child.status.reason == "dependency_failed"
    assert _cancel_reasons(ctx, child) == ["dependency_failed"]

    grandchild = await _reconcile(ctx, grandchild)
    assert grandchild.status.phase == Phase.CANCELLED
    assert grandchild.status.reason == "dependency_failed"
    assert _cancel_reasons(ctx, grandchild) == ["dependency_failed"]


async def test_a_terminal_parent_enqueues_its_children(ctx: Context) -> None:
    parent = _submit(ctx, "parent")
    child = _submit(ctx, "child", "parent")
    await _end(ctx, parent, Phase.PREEMPTED)
    change = [c for c in ctx.store.changes_since(0) if c.key == str(parent.id)][-1]
    keys = lifecycle.LifecycleController(ctx).keys_for(change)
    assert str(child.id) in keys


@pytest.mark.parametrize("how", [Phase.PREEMPTED, Phase.FAILED, Phase.CANCELLED])
async def test_any_exit_child_becomes_ready_whatever_the_parent_did(
    ctx: Context, how: Phase
) -> None:
    parent = _submit(ctx, "parent")
    child = _submit(ctx, "child", "parent", any_exit=True)
    assert reread(ctx, child).status.dependencies_met is False
    await _end(ctx, parent, how)
    child = await _reconcile(ctx, child)
    assert child.status.phase == Phase.PENDING
    assert child.status.dependencies_met is True
    assert ctx.store.list_events(job=child.id, event="job_cancelled") == []

    await SchedulerController(ctx).reconcile("queue")
    assert reread(ctx, child).status.phase == Phase.SCHEDULED


async def test_a_succeeded_parent_makes_the_child_ready(ctx: Context) -> None:
    parent = _submit(ctx, "parent")
    child = _submit(ctx, "child", "parent")
    await _end(ctx, parent, Phase.SUCCEEDED)
    child = await _reconcile(ctx, child)
    assert child.status.dependencies_met is True
    assert child.status.phase == Phase.PENDING
    met = [c for c in child.status.conditions if c.type == "DependenciesMet"]
    assert [c.status for c in met] == ["True"]


@pytest.mark.parametrize("how", [Phase.FAILED, Phase.CANCELLED])
async def test_a_parent_that_did_not_succeed_cancels_the_child(ctx: Context, how: Phase) -> None:
    parent = _submit(ctx, "parent")
    child = _submit(ctx, "child", "parent")
    await _end(ctx, parent, how)
    child = await _reconcile(ctx, child)
    assert child.status.phase == Phase.CANCELLED
    assert _cancel_reasons(ctx, child) == ["dependency_failed"]


async def test_a_child_waits_for_every_parent(ctx: Context) -> None:
    first = _submit(ctx, "first")
    second = _submit(ctx, "second")
    child = _submit(ctx, "child", "first", "second")
    await _end(ctx, first, Phase.SUCCEEDED)
    child = await _reconcile(ctx, child)
    assert child.status.dependencies_met is False
    assert child.status.phase == Phase.PENDING

    await _end(ctx, second, Phase.SUCCEEDED)
    assert (await _reconcile(ctx, child)).status.dependencies_met is True


async def test_one_bad_parent_cancels_even_while_another_runs(ctx: Context) -> None:
    first = _submit(ctx, "first")
    second = _submit(ctx, "second")
    child = _submit(ctx, "child", "first", "second")
    await _start(ctx, second)
    await _end(ctx, first, Phase.PREEMPTED)
    assert (await _reconcile(ctx, child)).status.phase == Phase.CANCELLED


async def test_a_parent_still_preempting_keeps_the_child_waiting(ctx: Context) -> None:
    parent = _submit(ctx, "parent")
    child = _submit(ctx, "child", "parent")
    running = await _start(ctx, parent)
    running = request_preemption(ctx, running, "manual")
    reports.report_stopping(ctx, running, "w")
    child = await _reconcile(ctx, child)
    assert child.status.phase == Phase.PENDING
    assert child.status.dependencies_met is False
