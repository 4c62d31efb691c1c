"""The checkpoint-complete report: pure observability, recorded exactly once.

The worker retries the POST until it is acknowledged, so the broker must not count a
retry as a second checkpoint: the flag in the job's preemption status is the dedup key,
and the event is committed with the flag.
"""

from __future__ import annotations

from jobd.api.models import Job, set_condition
from jobd.controllers.errors import TransitionError
from jobd.store.base import EventRecord, Store

__all__ = ["record_checkpoint_complete"]


def record_checkpoint_complete(store: Store, job: Job, worker: str) -> Job:
    preemption = job.status.preemption
    if preemption is None:
        raise TransitionError(f"job {job.id} is not being preempted; no checkpoint was asked for")
    if job.status.worker != worker:
        raise TransitionError(f"job {job.id} is bound to {job.status.worker!r}, not {worker!r}")
    if preemption.checkpoint_complete:
        return job
    job = job.evolve()
    assert job.status.preemption is not None
    job.status.preemption.checkpoint_complete = True
    set_condition(job.status, "CheckpointComplete", True, "SentinelSeen", f"seen by {worker}")
    event = EventRecord(
        "checkpoint_complete",
        job=job.id,
        worker=worker,
        fields={"candidate_job": preemption.candidate_job},
    )
    return store.update_job(job, [event])
