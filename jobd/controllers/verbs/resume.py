"""Resume: a preempted job's spec submitted again, pointed at its checkpoint.

A preempted job is never re-queued (the seed's default). `job resume` makes a new job
with the old spec, `RESUME_FROM` set to the old run's `latest.<ext>` (or its checkpoint
directory when there is no single such file), and a label naming the job it resumes.
With `spec.auto_resume`, the lifecycle controller does the same by itself after a
preemption whose checkpoint completed.
"""

from __future__ import annotations

from jobd.api.models import Job, ObjectMeta
from jobd.controllers import transitions
from jobd.controllers.context import Context
from jobd.controllers.errors import TransitionError
from jobd.controllers.transitions import Verb
from jobd.controllers.verbs.admission import create_jobs
from jobd.store.base import Store

__all__ = ["RESUMES_LABEL", "resume_job"]

RESUMES_LABEL = "jobd/resumes"


def _resume_target(job: Job) -> str:
    target = job.status.checkpoint_latest or job.status.checkpoint_dir
    if not target:
        raise TransitionError(f"job {job.id} never reported a checkpoint directory")
    return target


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


def resume_job(ctx: Context, job: Job) -> Job:
    store = ctx.store
    transitions.allowed(Verb.RESUME, job)
    spec = job.spec.model_copy(deep=True)
    spec.env["RESUME_FROM"] = _resume_target(job)
    spec.depends_on = []  # its parents already ran
    labels = dict(job.metadata.labels) | {RESUMES_LABEL: str(job.id)}
    meta = ObjectMeta(name=_free_name(store, job), project=job.project, labels=labels)
    created = create_jobs(store, [Job(metadata=meta, spec=spec)], ctx.clock)[0]
    marked, events = transitions.mark_resumed(job, created.id)
    store.update_job(marked, events)
    return created
