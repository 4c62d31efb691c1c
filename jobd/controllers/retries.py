"""Retries: a failed attempt's job waits out its backoff, then joins the queue again.

The decision is the state machine's (transitions.py): an attempt that failed as the job's
`spec.retry` says (its exit code, or its worker lost with `on_lost`), under its `limit`,
sends the job back to Pending with `status.retry_at` set (the `job_retrying` event), not
queued until then (the store's `ready` column is false meanwhile). This loop is the timer:
per-job key, `requeue_after` until `retry_at`, then `retry_ready` puts the job in the
queue, where the scheduler binds it as its next attempt. `retry_at` is in the store, so a
broker that restarts picks the timers up from its first listing. Next stage: the
scheduler (scheduler.py); the worker starts the new attempt with `RESUME_FROM` set to
`status.resume_from` (worker/settings.py).
"""

from __future__ import annotations

from collections.abc import Iterable

from jobd.api.models import Job, Phase
from jobd.controllers import transitions
from jobd.controllers.context import Context
from jobd.controllers.queueing import DONE, Result
from jobd.store.base import Change, Conflict

__all__ = ["RetriesController", "backing_off"]


def backing_off(job: Job) -> bool:
    """Whether `job` waits out a retry's backoff (what is worth a key here)."""
    return job.status.phase == Phase.PENDING and job.status.retry_at is not None


class RetriesController:
    """Per-job key: queue a retried job once its backoff is over; else come back then."""

    name = "retries"

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.resync_s = ctx.settings.sweep_interval_s

    def keys_for(self, change: Change) -> Iterable[str]:
        job = change.job
        return [change.key] if job is not None and backing_off(job) else []

    def keys_all(self) -> Iterable[str]:
        waiting = self.ctx.store.list_jobs(phases=[Phase.PENDING], ready=False)
        return [str(job.id) for job in waiting if backing_off(job)]

    async def reconcile(self, key: str) -> Result:
        job = self.ctx.store.get_job(int(key))
        if job is None or not backing_off(job):
            return DONE
        assert job.status.retry_at is not None
        now = self.ctx.clock.now()
        remaining = (job.status.retry_at - now).total_seconds()
        if remaining > 0:
            return Result(requeue_after=remaining)
        try:
            self.ctx.store.update_job(*transitions.retry_ready(job, now))
        except Conflict:
            return Result(requeue_after=0)  # changed under us: look again at once
        return DONE
