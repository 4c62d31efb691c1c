"""Resume: by hand (`job resume`) and, opted in, automatically after a completed checkpoint."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from jobd.api.models import Job, JobSpec, ObjectMeta, Phase, WorkerSpec
from jobd.controllers import lifecycle
from jobd.controllers.clock import FakeClock
from jobd.controllers.context import Context, Settings
from jobd.controllers.errors import TransitionError
from jobd.controllers.scheduler import SchedulerController
from jobd.controllers.verbs import reports
from jobd.controllers.verbs.admission import create_jobs
from jobd.controllers.verbs.preempt import request_preemption
from jobd.controllers.verbs.reports import record_checkpoint_complete
from jobd.controllers.verbs.resume import RESUMES_LABEL, resume_job
from jobd.controllers.verbs.worker_lease import register_worker
from jobd.store.sql import open_store
from jobd.worker.cleanup import resumed_ids

pytestmark = pytest.mark.anyio


@pytest.fixture
def ctx(tmp_path: Path) -> Iterator[Context]:
    store = open_store(f"sqlite:///{tmp_path}/jobd.db")
    context = Context(store, Settings(), FakeClock())
    register_worker(context, "w", WorkerSpec(slots=2), "host", "procgroup")
    yield context
    store.close()


async def _preempted(
    ctx: Context, name: str, checkpointed: bool, env_resume: str | None = None, **spec: object
) -> Job:
    env = {"LR": "3e-4"} | ({"RESUME_FROM": env_resume} if env_resume else {})
    job = Job(
        metadata=ObjectMeta(name=name, project="p", labels={"team": "vision"}),
        spec=JobSpec(command=["python", "train.py"], env=env, **spec),
    )
    job = create_jobs(ctx.store, [job], ctx.clock)[0]
    await SchedulerController(ctx).reconcile("queue")
    job = ctx.store.get_job(job.id) or job
    job.status.checkpoint_dir = f"/ckpt/{job.id}/"
    job = reports.report_started(ctx, ctx.store.update_job(job), "w")
    job = request_preemption(ctx, job, "manual")
    if checkpointed:
        job = record_checkpoint_complete(ctx, job, "w")
    job.status.checkpoint_latest = f"/ckpt/{job.id}/latest.pt"
    return reports.report_complete(ctx, job, "w", 0, None)


async def test_resume_submits_the_old_spec_pointed_at_latest(ctx: Context) -> None:
    old = await _preempted(ctx, "train", checkpointed=True)
    assert old.status.phase == Phase.PREEMPTED
    new = resume_job(ctx, old)
    assert new.spec.command == old.spec.command and new.spec.env["LR"] == "3e-4"
    assert new.spec.env["RESUME_FROM"] == f"/ckpt/{old.id}/latest.pt"
    assert new.metadata.labels == {"team": "vision", RESUMES_LABEL: str(old.id)}
    assert new.metadata.name == "train-r1" and new.status.phase == Phase.PENDING
    assert (ctx.store.get_job(old.id) or old).status.resumed_by == new.id
    assert resume_job(ctx, ctx.store.get_job(old.id) or old).metadata.name == "train-r2"


async def test_only_a_preempted_job_resumes(ctx: Context) -> None:
    job = create_jobs(ctx.store, [Job(spec=JobSpec(command=["true"]))], ctx.clock)[0]
    with pytest.raises(TransitionError):
        resume_job(ctx, job)


async def test_a_job_that_never_checkpointed_is_refused_unless_told_how(ctx: Context) -> None:
    old = await _preempted(ctx, "early", checkpointed=False)
    with pytest.raises(TransitionError, match=r"never completed a checkpoint.*--from-scratch"):
        resume_job(ctx, old)
    assert (ctx.store.get_job(old.id) or old).status.resumed_by is None
    assert len(ctx.store.list_jobs()) == 1  # nothing was created

    fresh = resume_job(ctx, old, from_scratch=True)
    assert "RESUME_FROM" not in fresh.spec.env and fresh.spec.env["LR"] == "3e-4"
    assert fresh.metadata.labels[RESUMES_LABEL] == str(old.id)
    forced = resume_job(ctx, ctx.store.get_job(old.id) or old, force=True)
    assert forced.spec.env["RESUME_FROM"] == f"/ckpt/{old.id}/latest.pt"
    with pytest.raises(TransitionError, match="exclude each other"):
        resume_job(ctx, old, from_scratch=True, force=True)


async def test_from_scratch_drops_a_resume_from_the_job_was_given(ctx: Context) -> None:
    old = await _preempted(ctx, "chain", checkpointed=True, env_resume="/ckpt/0/latest.pt")
    assert old.spec.env["RESUME_FROM"] == "/ckpt/0/latest.pt"
    assert "RESUME_FROM" not in resume_job(ctx, old, from_scratch=True).spec.env


async def test_auto_resume_resubmits_once_after_a_completed_checkpoint(ctx: Context) -> None:
    old = await _preempted(ctx, "auto", checkpointed=True, auto_resume=True)
    controller = lifecycle.LifecycleController(ctx)
    await controller.reconcile(str(old.id))
    await controller.reconcile(str(old.id))  # a second look makes no second job
    resumed = [j for j in ctx.store.list_jobs() if j.metadata.labels.get(RESUMES_LABEL)]
    assert len(resumed) == 1
    assert resumed[0].spec.env["RESUME_FROM"] == f"/ckpt/{old.id}/latest.pt"


async def test_no_auto_resume_without_a_completed_checkpoint_or_without_opting_in(
    ctx: Context,
) -> None:
    failed_ckpt = await _preempted(ctx, "nockpt", checkpointed=False, auto_resume=True)
    not_opted = await _preempted(ctx, "manual", checkpointed=True)
    controller = lifecycle.LifecycleController(ctx)
    for job in (failed_ckpt, not_opted):
        await controller.reconcile(str(job.id))
    assert not [j for j in ctx.store.list_jobs() if j.metadata.labels.get(RESUMES_LABEL)]


def test_checkpoint_dirs_that_live_jobs_resume_from_are_kept() -> None:
    root = Path("/data/ckpt")
    live = [
        {"spec": {"env": {"RESUME_FROM": "/data/ckpt/7/latest.pt"}}},
        {"spec": {"env": {"RESUME_FROM": "/data/ckpt/9/"}}},
        {"spec": {"env": {"RESUME_FROM": "/elsewhere/3/latest.pt"}}},
        {"spec": {"env": {}}},
    ]
    assert resumed_ids(root, live) == {7, 9}
