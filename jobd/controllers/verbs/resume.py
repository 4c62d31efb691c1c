"""Resume: a preempted job's spec submitted again, pointed at its checkpoint.

A preempted job is never re-queued (the seed's default). `job resume` makes a new job
with the old spec, `RESUME_FROM` set to the old run's `latest.<ext>` (or its checkpoint
directory when there is no single such file), and a label naming the job it resumes.
With `spec.auto_resume`, the lifecycle controller does the same by itself after a
preemption whose checkpoint completed.

A job whose checkpoint never completed (preempted before its handler was installed, or its
checkpoint outran the grace) has nothing trustworthy to resume from: pointing the new run at
an empty or half-written directory only makes it crash. So resuming it is refused unless the
caller says which way to go: `from_scratch` (a new run without RESUME_FROM) or `force` (its
checkpoint directory anyway, for a workload that saved without printing the sentinel).
"""

from __future__ import annotations

from jobd.api.models import Job, JobSpec, ObjectMeta
from jobd.api.vocabulary import ARRAY_INDEX, RESUME_FROM_RANK
from jobd.controllers import transitions
from jobd.controllers.context import Context
from jobd.controllers.errors import TransitionError
from jobd.controllers.transitions import Verb
from jobd.controllers.verbs.admission import create_jobs
from jobd.store.base import Store

__all__ = ["RESUMES_LABEL", "checkpoint_completed", "resume_job"]

RESUMES_LABEL = "jobd/resumes"


def checkpoint_completed(job: Job) -> bool:
    """Whether the worker saw the sentinel during this job's preemption grace."""
    preemption = job.status.preemption
    return preemption is not None and preemption.checkpoint_complete


def _resume_target(job: Job, force: bool) -> str:
    if not (force or checkpoint_completed(job)):
        raise TransitionError(
            f"job {job.id} never completed a checkpoint (no checkpoint_complete before it "
            "ended), so there is nothing to resume from: resume it with --from-scratch to "
            "start over, or --force to point RESUME_FROM at its checkpoint directory anyway"
        )
    target = job.status.checkpoint_latest or job.status.checkpoint_dir
    if not target:
        raise TransitionError(f"job {job.id} never reported a checkpoint directory")
    return target


def _resumed_spec(job: Job, from_scratch: bool, force: bool) -> JobSpec:
    spec = job.spec.model_copy(deep=True)
    for key in [k for k in spec.env if k.startswith(RESUME_FROM_RANK)]:
        del spec.env[key]  # an earlier resume's: this run's own are set below
    if from_scratch:
        spec.env.pop("RESUME_FROM", None)
    else:
        spec.env["RESUME_FROM"] = target = _resume_target(job, force)
        spec.env.update(_ranks_resume_from(job, target))
    spec.depends_on = []  # its parents already ran
    if job.metadata.array is not None:  # not a member itself: it keeps the member's index
        spec.env[ARRAY_INDEX] = str(job.metadata.array.index)
    return spec


def _ranks_resume_from(job: Job, rank_0s: str) -> dict[str, str]:
    """A gang resumed is a gang again: each rank resumes from the checkpoint its member
    left (its newest file, else its directory), else from rank 0's."""
    return {
        f"{RESUME_FROM_RANK}{m.rank}": m.checkpoint_latest or m.checkpoint_dir or rank_0s
        for m in job.status.members
    }


def _free_name(store: Store, job: Job) -> str:
    base = (job.metadata.name or f"job-{job.id}")[:56]
    stem, _, suffix = base.rpartition("-r")
    if stem and suffix.isdigit():
        base = stem
    for n in range(1, 10_000):
        name = f"{base}-r{n}"
        if store.get_job_by_name(job.project, name) is None:
            return name
    raise TransitionError(f"no free name left to resume {job.ref}")


def resume_job(ctx: Context, job: Job, *, from_scratch: bool = False, force: bool = False) -> Job:
    """A new job continuing `job`; raises TransitionError (409) when it cannot be resumed."""
    store = ctx.store
    transitions.allowed(Verb.RESUME, job)
    if from_scratch and force:
        raise TransitionError("--from-scratch and --force exclude each other: choose one")
    spec = _resumed_spec(job, from_scratch, force)
    labels = dict(job.metadata.labels) | {RESUMES_LABEL: str(job.id)}
    # The same owner: the new job runs as the one whose checkpoint it continues.
    meta = ObjectMeta(
        name=_free_name(store, job), project=job.project, labels=labels, owner=job.metadata.owner
    )
    created = create_jobs(store, [Job(metadata=meta, spec=spec)], ctx.clock)[0]
    marked, events = transitions.mark_resumed(job, created.id)
    store.update_job(marked, events)
    return created
