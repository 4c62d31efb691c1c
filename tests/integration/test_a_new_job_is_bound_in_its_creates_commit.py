"""A create binds its new jobs when a worker has room, in its own commit, as the
scheduler's pass would have: the same workers and GPUs, nothing taken ahead of a queued
job, quotas held, room held for a nominated job left alone, a gang bound whole or not at
all (controllers/verbs/placing_new.py). Real SQLite and PostgreSQL stores (the batch
written off the loop there), the real batcher and apply."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx
import pytest

from jobd.api.models import (
    Job,
    JobSpec,
    ObjectMeta,
    Phase,
    Project,
    ProjectQuota,
    ProjectSpec,
    Resources,
    WorkerSpec,
)
from jobd.broker.batching import CreateBatcher
from jobd.controllers.clock import FakeClock
from jobd.controllers.context import Context, Settings
from jobd.controllers.scheduler import QUEUE_KEY, SchedulerController
from jobd.controllers.verbs.admission import create_jobs
from jobd.controllers.verbs.worker_lease import register_worker
from jobd.store import open_store
from jobd.store.base import Change
from jobd.wire import routes
from tests.integration.conftest import broker_state, job_document, reread

pytestmark = pytest.mark.anyio


@pytest.fixture
def ctx(store_url: str) -> Iterator[Context]:
    """A broker's context on SQLite (store work inline) and on PostgreSQL (off the loop)."""
    store = open_store(store_url)
    off_loop = store_url.startswith("postgresql")
    yield Context(store, Settings(), FakeClock(), off_loop=off_loop)
    store.close()


@pytest.fixture
def other(tmp_path: Path) -> Iterator[Context]:
    """A second broker's context, on a store of its own: the pass's side of a comparison."""
    store = open_store(f"sqlite:///{tmp_path}/other.db")
    yield Context(store, Settings(), FakeClock())
    store.close()


def _job(name: str, priority: int = 0, gpus: int = 0, project: str = "p", **spec: object) -> Job:
    return Job(
        metadata=ObjectMeta(name=name, project=project),
        spec=JobSpec(command=["true"], priority=priority, resources=Resources(gpus=gpus), **spec),
    )


async def _create_together(ctx: Context, jobs: list[Job]) -> list[Job]:
    """Through the broker's batcher, in one turn of the loop: one batch, one commit."""
    batcher = CreateBatcher(ctx)
    made: dict[str, Job] = {}

    async def create(job: Job) -> None:
        made[job.metadata.name or ""] = await batcher.create(job)

    async with anyio.create_task_group() as tg:
        for job in jobs:
            tg.start_soon(create, job)
    return [made[job.metadata.name or ""] for job in jobs]


def _fleet(ctx: Context) -> None:
    register_worker(ctx, "cpu", WorkerSpec(slots=2), "h1", "procgroup")
    register_worker(ctx, "gpu", WorkerSpec(slots=2, gpus=[0, 1, 2]), "h2", "procgroup")


def _jobs() -> list[Job]:
    return [
        _job("low", priority=1),
        _job("two-gpus", priority=5, gpus=2),
        _job("high", priority=9),
        _job("one-gpu", priority=5, gpus=1),
        _job("too-big", priority=9, gpus=4),
        _job("mid", priority=3),
        _job("last", priority=1),
        _job("waits", priority=0),
    ]


def _placed(ctx: Context) -> dict[str, tuple[Phase, str | None, list[int]]]:
    return {
        job.metadata.name or "": (job.status.phase, job.status.worker, job.status.gpus)
        for job in ctx.store.list_jobs()
    }


def _scheduled_order(ctx: Context) -> list[int]:
    return [e.job for e in ctx.store.list_events(event="job_scheduled") if e.job is not None]


async def test_a_create_binds_what_a_pass_would_bind_in_its_own_commit(
    ctx: Context, other: Context
) -> None:
    _fleet(ctx)
    _fleet(other)
    answered = await _create_together(ctx, _jobs())
    create_jobs(other.store, _jobs(), other.clock)
    await SchedulerController(other).reconcile("queue")

    assert _placed(ctx) == _placed(other)
    assert _scheduled_order(ctx) == _scheduled_order(other)
    # The answer is the job as stored: bound, at its new version.
    assert all(job == reread(ctx, job) for job in answered)
    bound = [job for job in answered if job.status.phase == Phase.SCHEDULED]
    assert len(bound) == 6, "four slots, three GPUs; too-big and waits wait"
    # One commit: each bound job's versions, created then bound, are consecutive.
    for job in bound:
        assert [e.event for e in ctx.store.list_events(job=job.id)] == [
            "job_created",
            "job_scheduled",
        ]


async def test_no_new_job_goes_ahead_of_a_queued_one(ctx: Context) -> None:
    register_worker(ctx, "w", WorkerSpec(slots=1), "h", "procgroup")
    queued = create_jobs(ctx.store, [_job("queued", priority=5)], ctx.clock)[0]
    (new,) = await _create_together(ctx, [_job("new", priority=5)])
    assert new.status.phase == Phase.PENDING, "the queued job's pass decides, not the create"
    await SchedulerController(ctx).reconcile("queue")
    assert _scheduled_order(ctx) == [queued.id]


async def test_a_create_past_its_projects_quota_waits_as_the_pass_says(ctx: Context) -> None:
    quota = ProjectSpec(quota=ProjectQuota(gpus=1), borrow=False)
    ctx.store.put_project(Project(metadata=ObjectMeta(name="a"), spec=quota))
    register_worker(ctx, "w", WorkerSpec(slots=2, gpus=[0, 1]), "h", "procgroup")
    first, second = await _create_together(
        ctx, [_job("one", gpus=1, project="a"), _job("two", gpus=1, project="a")]
    )
    assert first.status.phase == Phase.SCHEDULED
    assert second.status.phase == Phase.PENDING
    scheduled = [c for c in reread(ctx, second).status.conditions if c.type == "Scheduled"]
    assert [(c.status, c.reason) for c in scheduled] == [("False", "QuotaExceeded")]


async def test_room_held_for_a_nominated_job_is_not_taken(ctx: Context) -> None:
    register_worker(ctx, "w", WorkerSpec(slots=1), "h", "procgroup")
    held = create_jobs(ctx.store, [_job("held", priority=1)], ctx.clock)[0].evolve()
    held.status.nominated_worker = "w"  # capacity freed by preemption for it
    ctx.store.update_job(held)
    (new,) = await _create_together(ctx, [_job("new", priority=9)])
    assert new.status.phase == Phase.PENDING
    await SchedulerController(ctx).reconcile("queue")
    assert reread(ctx, held).status.worker == "w"


async def test_a_new_gang_is_bound_whole_or_not_at_all(ctx: Context) -> None:
    for name in ("a", "b"):
        register_worker(ctx, name, WorkerSpec(slots=1), name, "procgroup")
    too_wide, fits = await _create_together(
        ctx, [_job("three", priority=9, nodes=3), _job("two", nodes=2)]
    )
    assert too_wide.status.phase == Phase.PENDING and not too_wide.status.members
    assert fits.status.phase == Phase.SCHEDULED
    assert sorted(m.worker for m in fits.status.members) == ["a", "b"]


async def test_without_room_a_create_leaves_its_job_queued(ctx: Context) -> None:
    (alone,) = await _create_together(ctx, [_job("no-worker")])
    assert alone.status.phase == Phase.PENDING
    register_worker(ctx, "w", WorkerSpec(slots=1), "h", "procgroup")
    first, second = await _create_together(ctx, [_job("a"), _job("b")])
    assert first.status.phase == Phase.PENDING, "the queued job's pass decides"
    await SchedulerController(ctx).reconcile("queue")
    assert _scheduled_order(ctx) == [alone.id]
    assert reread(ctx, second).status.phase == Phase.PENDING


async def test_an_apply_binds_its_new_jobs_and_answers_them_bound(
    api: httpx.AsyncClient,
) -> None:
    state = broker_state(api)
    register_worker(state.ctx, "w", WorkerSpec(slots=1), "h", "procgroup")
    docs = [job_document("first", priority=2), job_document("second", priority=1)]
    resp = await api.post(routes.APPLY.url(), json={"documents": docs})
    assert resp.status_code == 200, resp.text
    objects = {r["name"]: r["object"] for r in resp.json()["results"]}
    assert objects["default/first"]["status"]["phase"] == "Scheduled"
    assert objects["default/second"]["status"]["phase"] == "Pending"
    stored = state.store.get_job(objects["default/first"]["metadata"]["id"])
    assert (
        stored is not None
        and stored.metadata.resource_version
        == (objects["default/first"]["metadata"]["resource_version"])
    )
    # A dry run binds nothing, nor writes anything.
    dry = await api.post(
        routes.APPLY.url(), json={"documents": [job_document("d")], "dry_run": True}
    )
    assert dry.status_code == 200, dry.text
    assert state.store.get_job_by_name("default", "d") is None


async def test_a_create_that_bound_its_job_queues_no_scheduling_pass(ctx: Context) -> None:
    heard: list[Change] = []
    ctx.store.subscribe(lambda changes, _events: heard.extend(changes))
    scheduler = SchedulerController(ctx)
    register_worker(ctx, "w", WorkerSpec(slots=1), "h", "procgroup")
    heard.clear()
    await _create_together(ctx, [_job("bound")])
    assert [c.op for c in heard] == ["ADDED", "MODIFIED"]
    assert [k for c in heard for k in scheduler.keys_for(c)] == []
    heard.clear()
    await _create_together(ctx, [_job("queued")])  # no room left: the pass's to look at
    assert [k for c in heard for k in scheduler.keys_for(c)] == [QUEUE_KEY]
