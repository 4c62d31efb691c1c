"""Retention: a finished job is removed, with its logs and its events, once its TTL passes.

The TTL is the job's `ttl_after_finished_s`, else its project's default (both resolved
into `status.effective` while the job is unfinished), else the broker's
`--finished-job-ttl`; none of them: the job is kept for ever (Kubernetes'
`ttlSecondsAfterFinished`, the same idea). Per-job key; a pass returns `requeue_after`
until `finished_at + ttl` (a timer, never a poll), then deletes the job's row and its
events in one commit (`store.expire_job`) that appends `job_expired`. The broker removes
the job's output files when it hears that commit (broker/streams/joblogs.py). events.jsonl keeps
its lines: it is an append-only record, and the expiry is one more line in it.

A finished job some queued job still waits on (its `depends_on`, not yet judged) is kept
until that child has been judged: removed first, it would read as a missing parent and
cancel the child. It is looked at again a minute later (or after its TTL, if shorter).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from jobd.api.models import TERMINAL_PHASES, Job, Phase
from jobd.controllers.context import Context
from jobd.controllers.queueing import DONE, Result
from jobd.store.base import Change, Conflict, EventRecord, NotFound

__all__ = ["RetentionController", "expires_in"]

_CHILD_RECHECK_S = 60.0


def expires_in(job: Job, now: datetime, default_ttl_s: float | None) -> float | None:
    """Seconds until `job` is to be removed (<= 0: now); None: it is kept for ever."""
    finished = job.status.finished_at
    if job.status.phase not in TERMINAL_PHASES or finished is None:
        return None
    ttl = job.status.effective.ttl_after_finished_s
    ttl_s = float(ttl) if ttl is not None else default_ttl_s
    if ttl_s is None:
        return None
    return ttl_s - (now - finished).total_seconds()


class RetentionController:
    """Per-job key: remove the finished job whose TTL passed; else come back then."""

    name = "retention"

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        # Every finished job is listed once at start; after that, each job's end brings
        # its key. No periodic listing: the history may be long, and nothing is missed.
        self.resync_s = 0.0

    def keys_for(self, change: Change) -> Iterable[str]:
        job = change.job
        if change.op == "DELETED" or job is None or job.status.phase not in TERMINAL_PHASES:
            return []
        return [change.key] if self._has_ttl(job) else []

    def keys_all(self) -> Iterable[str]:
        jobs = self.ctx.store.list_jobs(phases=TERMINAL_PHASES)
        return [str(job.id) for job in jobs if self._has_ttl(job)]

    def _has_ttl(self, job: Job) -> bool:
        ttl = job.status.effective.ttl_after_finished_s
        return ttl is not None or self.ctx.settings.finished_job_ttl_s is not None

    async def reconcile(self, key: str) -> Result:
        job = self.ctx.store.get_job(int(key))
        if job is None:
            return DONE
        now = self.ctx.clock.now()
        remaining = expires_in(job, now, self.ctx.settings.finished_job_ttl_s)
        if remaining is None:
            return DONE
        if remaining > 0:
            return Result(requeue_after=remaining)
        if self._still_needed(job):
            return Result(requeue_after=_CHILD_RECHECK_S)
        return self._expire(job)

    def _still_needed(self, job: Job) -> bool:
        """Some child of `job` waits in the queue, its dependencies not yet judged."""
        if job.id not in self.ctx.view.parents:
            return False
        for child_id in self.ctx.store.children_of(job.id):
            child = self.ctx.store.get_job(child_id)
            if child and child.status.phase == Phase.PENDING and not child.status.dependencies_met:
                return True
        return False

    def _expire(self, job: Job) -> Result:
        own = job.status.effective.ttl_after_finished_s
        ttl = float(own) if own is not None else self.ctx.settings.finished_job_ttl_s
        fields = {"phase": job.status.phase.value, "ttl_s": ttl, "name": job.ref}
        try:
            self.ctx.store.expire_job(job, [EventRecord("job_expired", job=job.id, fields=fields)])
        except Conflict:
            return Result(requeue_after=0)
        except NotFound:
            pass  # deleted meanwhile (`job delete`): nothing left to do
        return DONE
