"""The worker's reports on a job it runs: started, stopping, complete, checkpoint-complete,
progress.

Each is fenced first (transitions.fence): a report from a worker the job is not bound
to, or of another attempt than the job's `status.attempt`, is refused (409) and changes
nothing. Each is then a compare-and-swap on the job the broker read, so a late report
from a worker presumed dead cannot clobber what happened since; a retried report
changes nothing and writes nothing. Next stage: the loops see the commit (a finished
job frees its slot for the scheduler and may release or cancel its children in
lifecycle). A multi-host job's reports say which member (`rank`) reports: its rules
are gangs.py's.
"""

from __future__ import annotations

from jobd.api.models import Job
from jobd.api.progress import Sample
from jobd.controllers import gangs, transitions
from jobd.controllers.context import Context
from jobd.store.base import EventRecord

__all__ = [
    "record_checkpoint_complete",
    "report_complete",
    "report_progress",
    "report_started",
    "report_stopping",
]


def _write(ctx: Context, old: Job, new: Job, events: list[EventRecord]) -> Job:
    return old if new is old else ctx.store.update_job(new, events)


def report_started(
    ctx: Context,
    job: Job,
    worker: str,
    attempt: int | None = None,
    rank: int = 0,
    said: tuple[int | None, str | None] = (None, None),
) -> Job:
    """The workload runs (again, for a Lost job whose worker came back). `said`: a gang
    member's master port (rank 0) and checkpoint directory."""
    if job.status.members:
        new, events = gangs.start(job, worker, rank, ctx.clock.now(), attempt, said)
    else:
        new, events = transitions.start(job, worker, ctx.clock.now(), attempt, rank)
    return _write(ctx, job, new, events)


def report_stopping(
    ctx: Context, job: Job, worker: str, attempt: int | None = None, rank: int = 0
) -> Job:
    """The worker has sent SIGTERM: Running becomes Preempting or Cancelling."""
    new, events = transitions.stopping(job, worker, ctx.clock.now(), attempt, rank)
    return _write(ctx, job, new, events)


def report_complete(
    ctx: Context,
    job: Job,
    worker: str,
    exit_code: int | None,
    exit_signal: int | None,
    attempt: int | None = None,
    failure: tuple[str, str] | None = None,
    member: tuple[int, str | None] = (0, None),
) -> Job:
    """The workload exited; the final phase follows from the desired one and the exit.
    `member`: a gang's reporting rank and the checkpoint it left."""
    now = ctx.clock.now()
    if job.status.members:
        rank, latest = member
        exit_ = (exit_code, exit_signal)
        new, events = gangs.complete(job, worker, rank, exit_, now, attempt, failure, latest)
    else:
        rank = member[0]
        new, events = transitions.complete(
            job, worker, exit_code, exit_signal, now, attempt, failure, rank
        )
    return _write(ctx, job, new, events)


def record_checkpoint_complete(
    ctx: Context, job: Job, worker: str, attempt: int | None = None, rank: int = 0
) -> Job:
    """Pure observability (the seed's path B), recorded exactly once: the worker retries
    the report until acknowledged, so the flag in the preemption status is the dedup key,
    committed with its event. A gang's, once every member's sentinel was seen."""
    now = ctx.clock.now()
    if job.status.members:
        new, events = gangs.checkpoint_complete(job, worker, rank, now, attempt)
    else:
        new, events = transitions.checkpoint_complete(job, worker, now, attempt)
    return _write(ctx, job, new, events)


def report_progress(
    ctx: Context, job: Job, worker: str, sample: Sample, attempt: int | None = None, rank: int = 0
) -> Job:
    """The workload's newest progress line, written as the job's status.progress."""
    new, events = transitions.progress(job, worker, sample, ctx.clock.now(), attempt, rank)
    return _write(ctx, job, new, events)
