"""Lifecycle: dependencies, cancellation, lost jobs, and what workers report.

Desired phase is set by users and by the preemption controller; the observed phase moves
only when a worker reports (started, stopping, complete) or when a rule here decides it:
a child whose parent ended badly is Cancelled (transitively, through its own key), a
cancelled job that never started ends at once, and a job Lost for too long is Failed.
Every transition is a compare-and-swap on the version the caller read, so a late report
from a worker presumed dead cannot clobber what happened since.
"""

from __future__ import annotations

from collections.abc import Iterable

from jobd.api.models import (
    BOUND_PHASES,
    TERMINAL_PHASES,
    Job,
    Phase,
    set_condition,
)
from jobd.controllers.context import Context
from jobd.controllers.errors import TransitionError
from jobd.controllers.queueing import DONE, Result
from jobd.controllers.resume import resume_job
from jobd.store.base import Change, Conflict, EventRecord, Store

__all__ = [
    "LifecycleController",
    "TransitionError",
    "cancel",
    "finish",
    "report_complete",
    "report_started",
    "report_stopping",
]


def finish(job: Job, phase: Phase, ctx: Context, reason: str | None = None) -> list[EventRecord]:
    """Move `job` (in place) to a terminal phase; the events that transition justifies."""
    now = ctx.clock.now()
    job.status.phase = phase
    job.status.desired_phase = phase
    job.status.finished_at = now
    job.status.nominated_worker = None
    job.status.reason = reason or job.status.reason
    set_condition(job.status, "Finished", True, phase.value, reason or "")
    events = [
        EventRecord(
            "job_finished",
            job=job.id,
            worker=job.status.worker,
            fields={"phase": phase.value, "exit_code": job.status.exit_code},
        )
    ]
    if phase == Phase.CANCELLED:
        events.append(EventRecord("job_cancelled", job=job.id, fields={"reason": reason or "user"}))
    return events


def cancel(store: Store, job: Job, ctx: Context, reason: str = "user") -> Job:
    """Set the desired phase to Cancelled; end the job at once if nothing runs it."""
    if job.status.phase in TERMINAL_PHASES:
        raise TransitionError(f"job {job.id} is already {job.status.phase}")
    job = job.evolve()
    job.status.desired_phase = Phase.CANCELLED
    job.status.reason = reason
    if job.status.phase in (Phase.PENDING, Phase.LOST):
        return store.update_job(job, finish(job, Phase.CANCELLED, ctx, reason), durable=True)
    if job.status.signal is None:
        job.status.signal = "cancel"
    return store.update_job(job, durable=True)


def _check_worker(job: Job, worker: str) -> None:
    if job.status.worker != worker:
        raise TransitionError(
            f"job {job.id} is bound to {job.status.worker!r}, not {worker!r}; report refused"
        )


def report_started(store: Store, job: Job, worker: str, ctx: Context) -> Job:
    _check_worker(job, worker)
    if job.status.phase in (Phase.RUNNING, Phase.PREEMPTING, Phase.CANCELLING):
        return job  # a retried report
    if job.status.phase not in (Phase.SCHEDULED, Phase.LOST):
        raise TransitionError(f"job {job.id} is {job.status.phase}; it cannot start")
    job = job.evolve()
    recovered = job.status.phase == Phase.LOST
    job.status.phase = Phase.RUNNING
    job.status.lost_at = None
    job.status.started_at = job.status.started_at or ctx.clock.now()
    set_condition(job.status, "Running", True, "Recovered" if recovered else "Started")
    name = "job_recovered" if recovered else "job_started"
    return store.update_job(job, [EventRecord(name, job=job.id, worker=worker)])


def report_stopping(store: Store, job: Job, worker: str, ctx: Context) -> Job:
    """The worker has sent SIGTERM: Running becomes Preempting or Cancelling."""
    _check_worker(job, worker)
    target = {"preempt": Phase.PREEMPTING, "cancel": Phase.CANCELLING}.get(job.status.signal or "")
    if target is None or job.status.phase in TERMINAL_PHASES or job.status.phase == target:
        return job
    job = job.evolve()
    job.status.phase = target
    job.status.stopping_at = ctx.clock.now()
    return store.update_job(job)


def report_complete(
    store: Store,
    job: Job,
    worker: str,
    exit_code: int | None,
    exit_signal: int | None,
    ctx: Context,
) -> Job:
    """The workload exited; the final phase follows from the desired one and the exit."""
    if job.status.phase in TERMINAL_PHASES:
        return job  # a retried or late report: what was decided stays decided
    _check_worker(job, worker)
    job = job.evolve()
    job.status.exit_code, job.status.exit_signal = exit_code, exit_signal
    desired = job.status.desired_phase
    phase: Phase
    if desired in (Phase.PREEMPTED, Phase.CANCELLED):
        phase = desired
        reason = job.status.reason or ("preempted" if desired == Phase.PREEMPTED else "user")
    elif exit_code == 0:
        phase, reason = Phase.SUCCEEDED, "exit 0"
    else:
        phase = Phase.FAILED
        reason = f"signal {exit_signal}" if exit_signal else f"exit code {exit_code}"
    return store.update_job(job, finish(job, phase, ctx, reason))


class LifecycleController:
    """Per-job reconcile: dependencies, cascade, cancel of unstarted jobs, lost timeout."""

    name = "lifecycle"

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.resync_s = ctx.settings.sweep_interval_s

    def keys_for(self, change: Change) -> Iterable[str]:
        job = change.job
        if job is None:
            return []
        phase = job.status.phase
        keys = []
        # Only what this loop acts on: a job waiting for parents, a Lost one, one that
        # may resume by itself; and when a job ends or goes, its children.
        waiting = phase == Phase.PENDING and not job.status.dependencies_met
        resumable = phase == Phase.PREEMPTED and job.spec.auto_resume
        if waiting or phase == Phase.LOST or resumable:
            keys.append(change.key)
        ended = phase in _TERMINAL_VALUES or change.op == "DELETED"
        if ended and int(change.key) in self.ctx.view.parents:
            keys += [str(c) for c in self.ctx.store.children_of(int(change.key))]
        return keys

    def keys_all(self) -> Iterable[str]:
        waiting = self.ctx.store.list_jobs(phases=[Phase.PENDING], ready=False)
        lost = self.ctx.store.list_jobs(phases=[Phase.LOST])
        return [str(j.id) for j in waiting + lost]

    async def reconcile(self, key: str) -> Result:
        job = self.ctx.store.get_job(int(key))
        if job is not None and _wants_auto_resume(job):
            resume_job(self.ctx.store, job, self.ctx)
            return DONE
        if job is None or job.status.phase in TERMINAL_PHASES:
            return DONE
        try:
            if job.status.phase == Phase.PENDING and not job.status.dependencies_met:
                return self._check_dependencies(job)
            if job.status.phase == Phase.LOST:
                return self._check_lost(job)
        except Conflict:
            return Result(requeue_after=0)  # changed under us: look again at once
        return DONE

    def _check_dependencies(self, job: Job) -> Result:
        store, parents = self.ctx.store, [self.ctx.store.get_job(p) for p in job.status.parents]
        ended = [p for p in parents if p is None or p.status.phase in TERMINAL_PHASES]
        failed = [p for p in parents if p is None or p.status.phase in _BAD_ENDS]
        if failed and not job.spec.depends_on_any_exit:
            culprit = failed[0].ref if failed[0] else "a deleted job"
            job = job.evolve()
            job.status.message = f"parent {culprit} did not succeed"
            store.update_job(job, finish(job, Phase.CANCELLED, self.ctx, "dependency_failed"))
            return DONE
        if len(ended) < len(parents):
            return DONE  # a parent's change will bring us back
        # Every parent ended, and each either succeeded or any exit was enough.
        job = job.evolve()
        job.status.dependencies_met = True
        job.status.queued_at = self.ctx.clock.now()
        set_condition(job.status, "DependenciesMet", True, "ParentsEnded")
        store.update_job(job)
        return DONE

    def _check_lost(self, job: Job) -> Result:
        assert job.status.lost_at is not None
        waited = (self.ctx.clock.now() - job.status.lost_at).total_seconds()
        remaining = self.ctx.settings.lost_timeout_s - waited
        if remaining > 0:
            return Result(requeue_after=remaining)
        job = job.evolve()
        job.status.message = f"worker {job.status.worker} did not come back"
        desired = job.status.desired_phase
        phase = desired if desired in (Phase.CANCELLED, Phase.PREEMPTED) else Phase.FAILED
        self.ctx.store.update_job(job, finish(job, phase, self.ctx, "worker_lost"))
        return DONE


def _wants_auto_resume(job: Job) -> bool:
    """Opt-in: a preemption whose checkpoint completed is resubmitted once."""
    preemption = job.status.preemption
    return (
        job.status.phase == Phase.PREEMPTED
        and job.spec.auto_resume
        and preemption is not None
        and preemption.checkpoint_complete
        and job.status.resumed_by is None
    )


_TERMINAL_VALUES = frozenset(p.value for p in TERMINAL_PHASES)
_BAD_ENDS = frozenset({Phase.FAILED, Phase.CANCELLED, Phase.PREEMPTED})
assert _BAD_ENDS <= TERMINAL_PHASES and Phase.LOST in BOUND_PHASES
