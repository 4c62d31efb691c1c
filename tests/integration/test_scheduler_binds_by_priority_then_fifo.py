"""The scheduler: who gets a free slot, on which worker, with which GPUs."""

from __future__ import annotations

import pytest

from jobd.api.models import Job, JobSpec, ObjectMeta, Phase, Resources, WorkerSpec
from jobd.controllers import lifecycle
from jobd.controllers.context import Context
from jobd.controllers.errors import TransitionError
from jobd.controllers.scheduler import SchedulerController
from jobd.controllers.verbs import reports
from jobd.controllers.verbs.admission import create_jobs
from jobd.controllers.verbs.preempt import preempt_blockers
from jobd.controllers.verbs.worker_lease import heartbeat, register_worker
from tests.integration.conftest import reread

pytestmark = pytest.mark.anyio


def _submit(
    ctx: Context,
    name: str,
    priority: int = 0,
    gpus: int = 0,
    gpu_memory: int | None = None,
    **spec: object,
) -> Job:
    resources = Resources(gpus=gpus, gpu_memory=gpu_memory)
    job = Job(
        metadata=ObjectMeta(name=name, project="p"),
        spec=JobSpec(command=["true"], priority=priority, resources=resources, **spec),
    )
    return create_jobs(ctx.store, [job], ctx.clock)[0]


async def _schedule(ctx: Context) -> None:
    await SchedulerController(ctx).reconcile("queue")


def _run_to_end(ctx: Context, job: Job, exit_code: int = 0) -> None:
    job = reread(ctx, job)
    assert job.status.worker is not None
    job = reports.report_started(ctx, job, job.status.worker)
    reports.report_complete(ctx, job, job.status.worker or "", exit_code, None)


def _scheduled_order(ctx: Context) -> list[int]:
    return [e.job for e in ctx.store.list_events(event="job_scheduled") if e.job is not None]


async def test_highest_priority_first_then_first_come_first_served(ctx: Context) -> None:
    register_worker(ctx, "w", WorkerSpec(slots=1), "host", "procgroup")
    low_a = _submit(ctx, "low-a", priority=1)
    high_a = _submit(ctx, "high-a", priority=5)
    mid = _submit(ctx, "mid", priority=3)
    high_b = _submit(ctx, "high-b", priority=5)
    low_b = _submit(ctx, "low-b", priority=1)
    for _ in range(5):
        await _schedule(ctx)
        bound = ctx.store.list_jobs(phases=[Phase.SCHEDULED])
        assert len(bound) == 1, "one slot, one job at a time"
        _run_to_end(ctx, bound[0])
    assert _scheduled_order(ctx) == [high_a.id, high_b.id, mid.id, low_a.id, low_b.id]


async def test_a_pass_fills_every_free_slot_in_priority_order(ctx: Context) -> None:
    register_worker(ctx, "w", WorkerSpec(slots=2), "host", "procgroup")
    jobs = [_submit(ctx, f"j{i}", priority=p) for i, p in enumerate([1, 9, 4, 9])]
    await _schedule(ctx)
    assert _scheduled_order(ctx) == [jobs[1].id, jobs[3].id]
    assert {j.id for j in ctx.store.list_jobs(phases=[Phase.PENDING])} == {jobs[0].id, jobs[2].id}


async def test_cpu_jobs_filling_the_slots_never_keep_a_gpu_job_waiting(ctx: Context) -> None:
    # What the issue saw: four CPU jobs took the four slots of a 4-GPU worker, and a
    # 1-GPU job waited while every GPU sat idle.
    register_worker(ctx, "box", WorkerSpec(slots=4, gpus=[0, 1, 2, 3]), "h", "procgroup")
    cpus = [_submit(ctx, f"cpu{i}", priority=9) for i in range(5)]
    await _schedule(ctx)
    gpu_job = _submit(ctx, "gpu", priority=1, gpus=1, preemptible=True)
    await _schedule(ctx)
    reports.report_started(ctx, reread(ctx, gpu_job), "box")

    phases = [reread(ctx, j).status.phase for j in cpus]
    assert phases.count(Phase.SCHEDULED) == 4, "the slots bound --slots CPU jobs"
    assert reread(ctx, gpu_job).status.gpus == [0], "a GPU job takes a GPU, not a slot"
    # The queued CPU job has no victim in the running, preemptible, lower-priority GPU job:
    # stopping it would free a GPU, not a slot.
    with pytest.raises(TransitionError, match="would make room"):
        preempt_blockers(ctx, reread(ctx, cpus[4]), dry_run=True)


async def test_memory_foreign_processes_use_keeps_a_job_off_that_gpu(ctx: Context) -> None:
    gib = 1 << 30
    spec = WorkerSpec(slots=1, gpus=[0, 1], gpu_memory={0: 48 * gib, 1: 80 * gib})
    register_worker(ctx, "box", spec, "h", "procgroup")
    # NVML on the worker: someone's notebook holds 20GiB of GPU 0, outside jobd.
    heartbeat(ctx, "box", [], {}, {0: 20 * gib})
    stored = ctx.store.get_worker("box")
    assert stored is not None and stored.status.gpu_memory_foreign == {0: 20 * gib}
    needs_40 = _submit(ctx, "needs-40", gpus=1, gpu_memory=40 * gib)
    await _schedule(ctx)
    assert reread(ctx, needs_40).status.gpus == [1], "GPU 0 has 28GiB free, not 40"

    heartbeat(ctx, "box", [], {}, {})  # the notebook is gone
    again = _submit(ctx, "again", gpus=1, gpu_memory=40 * gib)
    await _schedule(ctx)
    assert reread(ctx, again).status.gpus == [0]


async def test_jobs_go_only_where_slots_and_gpus_are_free(ctx: Context) -> None:
    register_worker(ctx, "gpu", WorkerSpec(slots=1, gpus=[0, 1, 2]), "h", "procgroup")
    register_worker(ctx, "cpu", WorkerSpec(slots=1), "h", "procgroup")
    two = _submit(ctx, "two", priority=9, gpus=2)
    one = _submit(ctx, "one", priority=8, gpus=1)
    starved = _submit(ctx, "starved", priority=7, gpus=1)
    cpus = [_submit(ctx, f"cpu{i}", priority=1) for i in range(3)]
    await _schedule(ctx)

    two, one, starved = reread(ctx, two), reread(ctx, one), reread(ctx, starved)
    assert (two.status.worker, one.status.worker) == ("gpu", "gpu")
    assert len(two.status.gpus) == 2 and len(one.status.gpus) == 1
    assert sorted(two.status.gpus + one.status.gpus) == [0, 1, 2], "no GPU handed out twice"
    assert starved.status.phase == Phase.PENDING, "no GPU left for it"

    # GPU jobs take no slot: gpu and cpu have one slot each. Two CPU jobs fit, the third waits.
    cpu_jobs = [reread(ctx, j) for j in cpus]
    placed = [j for j in cpu_jobs if j.status.phase == Phase.SCHEDULED]
    assert sorted(j.status.worker or "" for j in placed) == ["cpu", "gpu"]
    assert all(j.status.gpus == [] for j in placed)
    for worker in ("gpu", "cpu"):
        spec = ctx.store.get_worker(worker)
        assert spec is not None
        used = sum(j.spec.resources.slots for j in ctx.store.list_jobs(worker=worker))
        assert used <= spec.spec.slots

    # The GPU that comes back goes to the job that waited for one.
    freed = one.status.gpus
    _run_to_end(ctx, one)
    await _schedule(ctx)
    starved = reread(ctx, starved)
    assert starved.status.phase == Phase.SCHEDULED
    assert starved.status.gpus == freed


async def test_a_slot_freed_for_a_nominated_job_is_held_for_it(ctx: Context) -> None:
    register_worker(ctx, "w", WorkerSpec(slots=1), "host", "procgroup")
    victim = _submit(ctx, "victim", priority=1, preemptible=True)
    await _schedule(ctx)
    _ = reports.report_started(ctx, reread(ctx, victim), "w")
    equal_first = _submit(ctx, "equal-first", priority=10)
    candidate = _submit(ctx, "candidate", priority=10)
    preempt_blockers(ctx, reread(ctx, candidate), dry_run=False)
    higher = _submit(ctx, "higher", priority=20)
    assert reread(ctx, candidate).status.nominated_worker == "w"

    victim = reports.report_stopping(ctx, reread(ctx, victim), "w")
    reports.report_complete(ctx, victim, "w", None, 15)
    await _schedule(ctx)

    assert reread(ctx, candidate).status.phase == Phase.SCHEDULED
    assert reread(ctx, candidate).status.nominated_worker is None
    assert reread(ctx, equal_first).status.phase == Phase.PENDING
    assert reread(ctx, higher).status.phase == Phase.PENDING


async def test_a_gpu_freed_for_a_nominated_job_is_held_for_it(ctx: Context) -> None:
    register_worker(ctx, "w", WorkerSpec(slots=3, gpus=[0]), "host", "procgroup")
    victim = _submit(ctx, "victim", priority=1, gpus=1, preemptible=True)
    await _schedule(ctx)
    reports.report_started(ctx, reread(ctx, victim), "w")
    candidate = _submit(ctx, "candidate", priority=10, gpus=1)
    preempt_blockers(ctx, reread(ctx, candidate), dry_run=False)
    higher = _submit(ctx, "higher", priority=20, gpus=1)

    victim = reports.report_stopping(ctx, reread(ctx, victim), "w")
    reports.report_complete(ctx, victim, "w", None, 15)
    await _schedule(ctx)

    assert reread(ctx, candidate).status.phase == Phase.SCHEDULED
    assert reread(ctx, candidate).status.gpus == [0]
    assert reread(ctx, higher).status.phase == Phase.PENDING


async def test_a_nominated_job_does_not_block_free_room_it_does_not_need(ctx: Context) -> None:
    register_worker(ctx, "w", WorkerSpec(slots=2), "host", "procgroup")
    victim = _submit(ctx, "victim", priority=1, preemptible=True)
    filler = _submit(ctx, "filler", priority=1)
    await _schedule(ctx)
    for job in (victim, filler):
        reports.report_started(ctx, reread(ctx, job), "w")
    candidate = _submit(ctx, "candidate", priority=10)
    plan = preempt_blockers(ctx, reread(ctx, candidate), dry_run=False)
    assert len(plan.victims) == 1
    other = _submit(ctx, "other", priority=5)
    # The filler ends on its own: its slot is not the nominated one, so `other` may use it.
    reports.report_complete(ctx, reread(ctx, plan.victims[0]), "w", None, 15)
    remaining = filler if plan.victims[0].id == victim.id else victim
    reports.report_complete(ctx, reread(ctx, remaining), "w", 0, None)
    await _schedule(ctx)
    assert reread(ctx, candidate).status.phase == Phase.SCHEDULED
    assert reread(ctx, other).status.phase == Phase.SCHEDULED


async def test_jobs_waiting_on_dependencies_are_not_scheduled(ctx: Context) -> None:
    register_worker(ctx, "w", WorkerSpec(slots=2), "host", "procgroup")
    parent = _submit(ctx, "parent", priority=1)
    child = _submit(ctx, "child", priority=99, depends_on=["parent"])
    await _schedule(ctx)
    assert reread(ctx, parent).status.phase == Phase.SCHEDULED
    assert reread(ctx, child).status.phase == Phase.PENDING
    assert reread(ctx, child).status.worker is None

    _run_to_end(ctx, parent)
    await lifecycle.LifecycleController(ctx).reconcile(str(child.id))
    await _schedule(ctx)
    assert reread(ctx, child).status.phase == Phase.SCHEDULED


async def test_no_ready_worker_means_nothing_is_bound(ctx: Context) -> None:
    job = _submit(ctx, "alone")
    await _schedule(ctx)
    assert reread(ctx, job).status.phase == Phase.PENDING
    assert ctx.store.list_events(event="job_scheduled") == []


async def test_the_jobs_one_pass_binds_share_one_commit(ctx: Context) -> None:
    """Freed slots are filled in one transaction, heard once by the watch and the caches."""
    register_worker(ctx, "w", WorkerSpec(slots=3), "host", "procgroup")
    jobs = [_submit(ctx, f"j{i}") for i in range(4)]
    heard: list[tuple[list[int], list[str]]] = []
    ctx.store.subscribe(
        lambda changes, events: heard.append(
            ([c.job.id for c in changes if c.job is not None], [e.event for e in events])
        )
    )
    await _schedule(ctx)
    assert heard == [([j.id for j in jobs[:3]], ["job_scheduled"] * 3)]
