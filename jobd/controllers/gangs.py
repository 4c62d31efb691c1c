"""One life for a multi-host job (a gang): its members' reports, and how the job follows.

A gang is ONE job (one id, one `status.attempt`, one phase) whose `status.members` name
the worker of each rank, rank 0 mirrored in `status.worker` (docs/concepts.md, "Jobs
across several hosts"). Each member's worker reports on its member only, with its rank;
the functions here are the gang's side of transitions.py's reports, pure as they are:

- `start`: the member runs; the job is Running once every member does. Rank 0's report
  carries the free port it chose (`status.master_port`), which the other ranks' agents
  wait for before they launch.
- `complete`: the member ended. The first member to fail while the gang runs drives the
  job to Failed (`failed_rank`, that member's exit) and stops the others with the job's
  grace (`signal=cancel`, as a cancel would); the job ends when every member has ended.
- `checkpoint_complete`: the job's flag (and its one event) once every member saw the
  sentinel. Progress is rank 0's alone (reports.py).

A job of one node never comes here: its reports are transitions.py's, unchanged.
"""

from __future__ import annotations

from datetime import datetime

from jobd.api.models import TERMINAL_PHASES, Job, Member, Phase, set_condition
from jobd.controllers import transitions
from jobd.controllers.errors import TransitionError
from jobd.controllers.transition_table import Verb, allowed
from jobd.store.base import EventRecord

__all__ = [
    "checkpoint_complete",
    "complete",
    "gpus_on",
    "member_workers",
    "rank_of",
    "runs_on",
    "start",
]

Events = list[EventRecord]
P = Phase
_DRIVEN_ENDS = (P.CANCELLED, P.PREEMPTED)


def member_workers(job: Job) -> list[str]:
    """The workers a job runs on: its members', rank 0 first, else its one worker."""
    if job.status.members:
        return [m.worker for m in job.status.members]
    return [job.status.worker] if job.status.worker else []


def runs_on(job: Job, worker: str) -> bool:
    """Whether `worker` runs (a member of) `job`."""
    if job.status.worker == worker:
        return True
    return any(m.worker == worker for m in job.status.members)


def rank_of(job: Job, worker: str) -> int | None:
    """The rank `worker` runs of a gang (0 for the worker of a job of one node)."""
    for member in job.status.members:
        if member.worker == worker:
            return member.rank
    return 0 if job.status.worker == worker else None


def gpus_on(job: Job, worker: str) -> list[int]:
    """The GPUs `job` holds on `worker`: its member's there (a gang), else its own."""
    for member in job.status.members:
        if member.worker == worker:
            return member.gpus
    return job.status.gpus


def _member(job: Job, worker: str, rank: int, attempt: int | None) -> Member:
    transitions.fence(job, worker, attempt, rank)
    return job.status.members[rank]


def start(
    job: Job,
    worker: str,
    rank: int,
    now: datetime,
    attempt: int | None = None,
    said: tuple[int | None, str | None] = (None, None),
) -> tuple[Job, Events]:
    """Member `rank` runs: the job Running when all do (Lost: Running again). `said`: the
    member's `started`, its master port (rank 0's is the gang's) and checkpoint directory."""
    member = _member(job, worker, rank, attempt)
    if member.phase == P.RUNNING and job.status.phase != P.LOST:
        return job, []  # a retried report
    if member.phase in TERMINAL_PHASES:
        return job, []  # a late report of a member that has already ended
    job = job.evolve()
    status = job.status
    member = status.members[rank]
    member.phase, member.started_at = P.RUNNING, member.started_at or now
    master_port, member.checkpoint_dir = said[0], said[1] or member.checkpoint_dir
    if rank == 0:
        status.master_port = master_port or status.master_port
        status.checkpoint_dir = member.checkpoint_dir or status.checkpoint_dir
    # Every member started (one may have ended already: a quick rank 0 while the
    # others were still waiting for its port).
    everyone = all(m.started_at is not None for m in status.members)
    if status.phase == P.LOST or (status.phase == P.SCHEDULED and everyone):
        allowed(Verb.STARTED, job)
        return job, _running(job, now)
    return job, []


def _running(job: Job, now: datetime) -> Events:
    status = job.status
    recovered = status.phase == P.LOST
    status.phase, status.lost_at = P.RUNNING, None
    status.started_at = status.started_at or now
    set_condition(status, "Running", True, "Recovered" if recovered else "Started", now=now)
    name = "job_recovered" if recovered else "job_started"
    return [EventRecord(name, job=job.id, worker=status.worker)]


def complete(
    job: Job,
    worker: str,
    rank: int,
    exit_: tuple[int | None, int | None],
    now: datetime,
    attempt: int | None = None,
    failure: tuple[str, str] | None = None,
    checkpoint_latest: str | None = None,
) -> tuple[Job, Events]:
    """Member `rank` exited (`exit_`: code, signal); the job ends once every member has."""
    member = _member(job, worker, rank, attempt)
    if job.status.phase in TERMINAL_PHASES or member.phase in TERMINAL_PHASES:
        return job, []  # a retried or late report: what was decided stays decided
    allowed(Verb.COMPLETE, job)
    job = job.evolve()
    status = job.status
    member = status.members[rank]
    member.exit_code, member.exit_signal = exit_
    member.finished_at, member.checkpoint_latest = now, checkpoint_latest
    failed = failure is not None or exit_ != (0, None)
    member.reason = _member_reason(exit_, failure)
    member.phase = P.FAILED if failed else P.SUCCEEDED
    if status.desired_phase in _DRIVEN_ENDS:
        member.phase = status.desired_phase
    elif failed and status.failed_rank is None and status.desired_phase == P.RUNNING:
        _first_failure(job, member, failure)
    if any(m.phase not in TERMINAL_PHASES for m in status.members):
        return job, []
    return _end(job, now)


def _member_reason(exit_: tuple[int | None, int | None], failure: tuple[str, str] | None) -> str:
    code, signal = exit_
    if failure is not None:
        return failure[0]
    if signal:
        return f"signal {signal}"
    return "exit 0" if code == 0 else f"exit code {code}"


def _first_failure(job: Job, member: Member, failure: tuple[str, str] | None) -> None:
    """The gang fails with this member: the others are stopped with the job's grace."""
    status = job.status
    status.failed_rank = member.rank
    status.exit_code, status.exit_signal = member.exit_code, member.exit_signal
    status.desired_phase, status.signal = P.FAILED, "cancel"
    status.reason = f"rank {member.rank} failed: {member.reason}"
    status.message = failure[1] if failure else f"member {member.rank} on {member.worker} ended"


def _end(job: Job, now: datetime) -> tuple[Job, Events]:
    """Every member has ended: the job ends as it was driven, else by its members' exits."""
    status = job.status
    status.checkpoint_latest = status.members[0].checkpoint_latest or status.checkpoint_latest
    desired = status.desired_phase
    if desired in _DRIVEN_ENDS:
        fallback = "preempted" if desired == P.PREEMPTED else "user"
        return transitions.finish(job, desired, now, status.reason or fallback)
    if status.failed_rank is not None:
        return transitions.fail(job, now, status.reason or "member failed")
    if desired == P.FAILED and status.reason:  # a hang guard drove it to Failed
        return transitions.finish(job, P.FAILED, now, status.reason)
    status.exit_code, status.exit_signal = 0, None
    return transitions.finish(job, P.SUCCEEDED, now, "exit 0")


def checkpoint_complete(
    job: Job, worker: str, rank: int, now: datetime, attempt: int | None = None
) -> tuple[Job, Events]:
    """Member `rank` saw the sentinel; the job's checkpoint is complete (its one
    `checkpoint_complete` event) once every member's is."""
    member = _member(job, worker, rank, attempt)
    if job.status.preemption is None:
        raise TransitionError(f"job {job.id} is not being preempted; no checkpoint was asked for")
    if member.checkpoint_complete:
        return job, []
    job = job.evolve()
    job.status.members[rank].checkpoint_complete = True
    if not all(m.checkpoint_complete for m in job.status.members):
        return job, []
    return transitions.checkpoint_complete(job, worker, now, attempt, rank)
