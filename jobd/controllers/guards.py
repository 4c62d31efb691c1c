"""Hang guards: a job queued, running or silent for too long is ended, Failed.

Three limits, each a job's own or its project's default (`status.effective`):
`max_pending_s` (in the queue: from `queued_at`, while Pending and ready),
`max_runtime_s` (wall clock from `started_at`, while Running: Slurm's `--time`,
Kubernetes' `activeDeadlineSeconds`) and `idle_timeout_s` (no output reached the broker
for that long while Running). Per-job key; each pass finds the soonest deadline and
returns `requeue_after` until it (timers, never a poll). When one runs out, the state
machine's `time_out` (transitions.py) ends a queued job at once, or drives a running one
to Failed: its worker stops it as it would a cancel (SIGTERM, the job's grace, SIGKILL),
so it can checkpoint, and its `complete` ends it Failed with the guard's reason
(`PendingTimeout`, `MaxRuntimeExceeded`, `IdleTimeout`).

Queue and run time are wall time: the job waited, or ran, whether or not the broker was
up. Silence is measured only over time this broker observed (observed.py): output a
worker could not ship while the broker was down is no silence of the job's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime

from jobd.api.models import Job, Phase
from jobd.controllers import transitions
from jobd.controllers.context import Context
from jobd.controllers.queueing import DONE, Result
from jobd.store.base import Change, Conflict

__all__ = ["Deadline", "GuardsController", "guarded", "soonest_deadline"]


@dataclass(frozen=True)
class Deadline:
    """A guard's verdict on a job: its reason, what it will say, seconds left (<= 0: out)."""

    reason: str
    message: str
    remaining_s: float


def soonest_deadline(
    job: Job, now: datetime, idle_for: Callable[[datetime], float]
) -> Deadline | None:
    """The guard of `job` that runs out first, or None when none watches it now.

    `idle_for(since)` is the silence, in seconds, since the later of `since` (the start)
    and the job's last output: the caller's to measure (observed time, the logs).
    """
    if job.status.desired_phase != Phase.RUNNING:
        return None  # already driven elsewhere (cancelled, preempted, timed out)
    found = [d for d in _deadlines(job, now, idle_for) if d is not None]
    return min(found, key=lambda d: d.remaining_s, default=None)


def _deadlines(
    job: Job, now: datetime, idle_for: Callable[[datetime], float]
) -> Iterable[Deadline | None]:
    limits, status = job.status.effective, job.status
    if status.phase == Phase.PENDING and status.dependencies_met:
        queued = status.queued_at or job.metadata.created_at
        if limits.max_pending_s and queued is not None:
            waited = (now - queued).total_seconds()
            yield _deadline("PendingTimeout", "queued", limits.max_pending_s, waited)
    if status.phase == Phase.RUNNING and status.started_at is not None:
        if limits.max_runtime_s:
            ran = (now - status.started_at).total_seconds()
            yield _deadline("MaxRuntimeExceeded", "ran", limits.max_runtime_s, ran)
        if limits.idle_timeout_s:
            silent = idle_for(status.started_at)
            yield _deadline("IdleTimeout", "printed nothing", limits.idle_timeout_s, silent)


def _deadline(reason: str, verb: str, limit_s: int, spent_s: float) -> Deadline:
    message = f"{verb} for {limit_s} s, its limit"
    return Deadline(reason, message, limit_s - spent_s)


def guarded(job: Job) -> bool:
    """Whether some guard may watch `job` in its phase (what is worth a key)."""
    limits, phase = job.status.effective, job.status.phase
    if job.status.desired_phase != Phase.RUNNING:
        return False
    if phase == Phase.PENDING:
        return limits.max_pending_s is not None
    return phase == Phase.RUNNING and bool(limits.max_runtime_s or limits.idle_timeout_s)


class GuardsController:
    """Per-job key: end the job whose guard ran out; else come back when one will."""

    name = "guards"

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.resync_s = ctx.settings.sweep_interval_s

    def keys_for(self, change: Change) -> Iterable[str]:
        job = change.job
        return [change.key] if job is not None and guarded(job) else []

    def keys_all(self) -> Iterable[str]:
        jobs = self.ctx.store.list_jobs(phases=[Phase.PENDING, Phase.RUNNING])
        return [str(job.id) for job in jobs if guarded(job)]

    async def reconcile(self, key: str) -> Result:
        job = self.ctx.store.get_job(int(key))
        if job is None or not guarded(job):
            return DONE
        now = self.ctx.clock.now()
        deadline = soonest_deadline(job, now, lambda since: self._idle_for(job, since))
        if deadline is None:
            return DONE
        if deadline.remaining_s > 0:
            return Result(requeue_after=deadline.remaining_s)
        ended = transitions.time_out(job, deadline.reason, deadline.message, now)
        try:
            self.ctx.store.update_job(*ended, durable=True)
        except Conflict:
            return Result(requeue_after=0)  # changed under us: look again at once
        return DONE

    def _idle_for(self, job: Job, started: datetime) -> float:
        last = self.ctx.last_output(job.id)
        since = max(started, last) if last is not None else started
        return self.ctx.observed.elapsed_since(since)
