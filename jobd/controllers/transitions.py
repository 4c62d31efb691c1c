"""The job state machine's moves: pure functions, one per verb, report or loop decision.

Every phase write in the broker comes through here. A verb, a worker report or a
reconcile loop reads the job, calls one function below with its input and the time,
and gets back the new job and the events that move justifies; the caller then writes
both with one compare-and-swap (`store.update_job`). Each function first asks the table
(transition_table.py) whether its verb applies to the job's phase. Nothing here reads
the store or the clock, so the whole machine is tested in memory
(tests/unit/test_verbs_move_jobs_only_as_the_table_says.py). A function that has nothing
to change returns the very job it was given, with no events: the caller then writes
nothing (a retried report, a `complete` on a finished job).

Adding a verb: a `Verb` and its `Rule` in the table, and a function here that asks
`allowed()` first.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Literal

from jobd.api.models import (
    MAX_ATTEMPTS_KEPT,
    SCRUBBED_PHASES,
    TERMINAL_PHASES,
    Attempt,
    Condition,
    Job,
    JobStatus,
    Member,
    Phase,
    PreemptionStatus,
    set_condition,
)
from jobd.api.progress import Sample
from jobd.api.secrets import mask_job
from jobd.api.wait_reasons import WaitReason
from jobd.controllers import progress as progress_math
from jobd.controllers.errors import TransitionError
from jobd.controllers.quotas import QUOTA_EXCEEDED
from jobd.controllers.transition_table import TABLE, Verb, allowed, preempt_refusal
from jobd.store.base import EventRecord

__all__ = [
    "PARENTS_WAITED",
    "ROOM_TAKEN",
    "TABLE",
    "PreemptReason",
    "Verb",
    "allowed",
    "array_capped",
    "bind",
    "bind_gang",
    "cancel",
    "checkpoint_complete",
    "complete",
    "dependencies_met",
    "dependency_failed",
    "fail",
    "fence",
    "finish",
    "lose",
    "lost_timeout",
    "mark_resumed",
    "nominate",
    "nominate_gang",
    "placeable",
    "process_vanished",
    "progress",
    "quota_exceeded",
    "record_checkpoint_dir",
    "record_checkpoint_latest",
    "record_cpuset",
    "release_nomination",
    "request_preemption",
    "retry_ready",
    "scrub_secrets",
    "start",
    "stopping",
    "time_out",
    "unbind",
    "ungang",
    "unschedulable",
    "wait_reason",
    "waits",
    "within_quota",
]

Events = list[EventRecord]
PreemptReason = Literal["sweeper", "manual", "blockers", "drain", "reclaim"]
P = Phase
_STOP_TARGET = {"preempt": P.PREEMPTING, "cancel": P.CANCELLING}


def _end(job: Job, phase: Phase, now: datetime, reason: str | None) -> Events:
    """Move `job`, a copy this module made, to a terminal phase."""
    _record_attempt(job, now, reason)
    status = job.status
    status.phase = status.desired_phase = phase
    status.finished_at = now
    status.nominated_worker = status.retry_at = None
    status.nominated_workers = []
    status.reason = reason or status.reason
    set_condition(status, "Finished", True, phase.value, reason or "", now=now)
    if phase in SCRUBBED_PHASES:
        scrub_secrets(job, now)
    events = [
        EventRecord(
            "job_finished",
            job=job.id,
            worker=status.worker,
            fields={"phase": phase.value, "exit_code": status.exit_code},
        )
    ]
    if phase == P.CANCELLED:
        events.append(EventRecord("job_cancelled", job=job.id, fields={"reason": reason or "user"}))
    return events


def _fail_or_retry(job: Job, now: datetime, reason: str, lost: bool = False) -> Events:
    """Move `job`, a copy this module made, to Failed; or, when its retry policy takes
    this failure, back to the queue after its backoff (the same job, its next attempt)."""
    wait = _retry_wait(job, lost)
    if wait is None:
        return _end(job, P.FAILED, now, reason)
    return _retry(job, now, reason, wait)


def _retry_wait(job: Job, lost: bool) -> float | None:
    """The backoff before running `job` again, None when its policy does not retry this
    failure: no policy, its limit reached, a lost worker without `on_lost`, an exit
    code not in `on_exit_codes` (a signal N counts as 128+N)."""
    policy, status = job.spec.retry, job.status
    if policy is None or status.retries >= policy.limit:
        return None
    if lost:
        return policy.wait_s(status.retries + 1) if policy.on_lost else None
    if policy.on_exit_codes is not None:
        code = status.exit_code
        if code is None and status.exit_signal is not None:
            code = 128 + status.exit_signal
        if code not in policy.on_exit_codes:
            return None
    return policy.wait_s(status.retries + 1)


def _record_attempt(job: Job, now: datetime, reason: str | None) -> None:
    """Keep how this run ended in status.attempts (jobs with a retry policy only, and
    only a run that was bound: a queued job cancelled made none)."""
    status = job.status
    if job.spec.retry is None or status.worker is None:
        return
    ended = Attempt(
        attempt=status.attempt,
        worker=status.worker,
        exit_code=status.exit_code,
        exit_signal=status.exit_signal,
        reason=reason,
        started_at=status.started_at,
        finished_at=now,
    )
    status.attempts = [*status.attempts, ended][-MAX_ATTEMPTS_KEPT:]


def _retry(job: Job, now: datetime, reason: str, wait_s: float) -> Events:
    """Back to Pending, unbound, not queued before its backoff is over (retry_ready).

    The run's checkpoint, when it left one (a `latest.*` file: checkpoints.py), is where
    the next run resumes from; else the one an earlier run left, if any. A gang's ranks
    each resume from their own (`resume_from_ranks`).
    """
    _record_attempt(job, now, reason)
    status = job.status
    worker, latest = status.worker, status.checkpoint_latest
    if latest and not latest.endswith("/"):
        status.resume_from = latest
    status.retries += 1
    status.phase, status.worker, status.gpus = P.PENDING, None, []
    status.desired_phase = P.RUNNING  # a gang's failing member had driven it to Failed
    if status.members:
        status.resume_from_ranks = _ranks_latest(status)
        ungang(status)
    status.exit_code = status.exit_signal = None
    status.scheduled_at = status.started_at = status.stopping_at = status.lost_at = None
    status.progress = status.preemption = status.signal = None
    status.retry_at = status.queued_at = now + timedelta(seconds=wait_s)
    status.reason = None
    status.message = f"attempt {status.attempt} ended: {reason}; run again in {wait_s:g} s"
    set_condition(status, "Running", False, "Retrying", reason, now=now)
    waits(status, WaitReason.RETRY_BACKOFF, status.message, now)
    fields = {
        "attempt": status.attempt + 1,
        "retry": status.retries,
        "wait_s": wait_s,
        "reason": reason,
        "resume_from": status.resume_from,
    }
    return [EventRecord("job_retrying", job=job.id, worker=worker, fields=fields)]


def _ranks_latest(status: JobStatus) -> dict[str, str]:
    """Each rank's checkpoint to resume from after a retry: the file its member's run
    left, else the one an earlier run of that rank left (the rule of `resume_from`)."""
    latest = dict(status.resume_from_ranks)
    for member in status.members:
        path = member.checkpoint_latest
        if path and not path.endswith("/"):
            latest[str(member.rank)] = path
    return latest


_RETRY_BACKOFF = WaitReason.RETRY_BACKOFF.value
# What a queued job says while some worker could run it but none has the room free.
ROOM_TAKEN = "waiting for a worker with room"
# What a job says while some job of its depends_on has not ended as it requires.
PARENTS_WAITED = "waiting for the jobs it depends on to end"


def waits(status: JobStatus, reason: WaitReason, message: str, now: datetime | None) -> None:
    """Say why a queued job is not running: its `Scheduled=False` condition's reason
    (api/wait_reasons.py), written with the move that makes it so, never on its own."""
    set_condition(status, "Scheduled", False, reason.value, message, now=now)


def array_capped(parallelism: int) -> str:
    """What a member past its array's cap says (WaitReason.ARRAY_PARALLELISM)."""
    return f"its array runs at most {parallelism} members at once"


def wait_reason(job: Job, reason: WaitReason, message: str, now: datetime) -> tuple[Job, Events]:
    """The scheduler saw why a queued job waits: said when it differs from what the job
    says (so a reason is written once per change, never once per pass). An Unschedulable
    verdict stays: it is placement's to lift."""
    allowed(Verb.PLACEABILITY, job)
    held = _scheduled_condition(job)
    if held is not None and held.reason in (reason, _UNSCHEDULABLE):
        return job, []
    job = job.evolve()
    waits(job.status, reason, message, now)
    return job, []


def _queued_again(status: JobStatus, replacing: str, now: datetime | None) -> None:
    """The job waits for room now, unless its Scheduled condition says something other
    than `replacing` (an Unschedulable verdict is placement's to lift)."""
    held = next((c for c in status.conditions if c.type == "Scheduled"), None)
    if held is None or held.reason == replacing:
        waits(status, WaitReason.WAITING_FOR_CAPACITY, ROOM_TAKEN, now)


def retry_ready(job: Job, now: datetime) -> tuple[Job, Events]:
    """A retried job's backoff is over: it joins the queue (its next bind is its next
    attempt). Nothing to do for a job not waiting out a backoff."""
    allowed(Verb.RETRY_READY, job)
    if job.status.retry_at is None:
        return job, []
    job = job.evolve()
    status = job.status
    status.retry_at, status.queued_at, status.message = None, now, None
    _queued_again(status, _RETRY_BACKOFF, now)
    return job, []


def scrub_secrets(job: Job, now: datetime) -> None:
    """Replace `job`'s secret env values by the mask, for good: the job has ended.

    `job` is a copy this module made; its spec, shared with the job it was made from,
    is replaced, not changed. The same write that ends the job stores this, so no
    finished job keeps a secret in the store (a Preempted one does: it may be resumed).
    """
    masked = mask_job(job, notify=False)  # the end is what notify targets are for
    if masked is job:
        return
    hidden = [key for key, value in job.spec.env.items() if masked.spec.env[key] != value]
    job.spec = masked.spec
    message = "secret env values removed from the store: " + ", ".join(hidden)
    set_condition(job.status, "SecretsScrubbed", True, "JobEnded", message, now=now)


def ungang(status: JobStatus) -> None:
    """A multi-host job back in the queue holds none of its members' workers: its next
    bind places the whole gang anew (and picks a new master port)."""
    status.members, status.master_port, status.failed_rank = [], None, None


def fail(job: Job, now: datetime, reason: str) -> tuple[Job, Events]:
    """`job` failed with the exit in its status: Failed, or retried as its policy says."""
    job = job.evolve()
    return job, _fail_or_retry(job, now, reason)


def finish(job: Job, phase: Phase, now: datetime, reason: str | None = None) -> tuple[Job, Events]:
    """`job` ended in `phase`: desired and observed alike, with the events of an end."""
    job = job.evolve()
    return job, _end(job, phase, now, reason)


def _desired_end(job: Job) -> Phase:
    """How a job ends that nobody saw end: as it was driven, else Failed."""
    desired = job.status.desired_phase
    return desired if desired in (P.CANCELLED, P.PREEMPTED) else P.FAILED


# User verbs


def cancel(job: Job, now: datetime, reason: str = "user") -> tuple[Job, Events]:
    """Desired phase Cancelled; the job ends at once if nothing runs it."""
    to = allowed(Verb.CANCEL, job)
    job = job.evolve()
    job.status.desired_phase = P.CANCELLED
    job.status.reason = reason
    if P.CANCELLED in to:
        return job, _end(job, P.CANCELLED, now, reason)
    if job.status.signal is None:
        job.status.signal = "cancel"
    return job, []


def request_preemption(
    job: Job, now: datetime, reason: PreemptReason, candidate: Job | None = None
) -> tuple[Job, Events]:
    """Drive a Running job toward Preempted (`signal=preempt`); the `auto_preempt` event."""
    allowed(Verb.PREEMPT, job)
    if job.status.desired_phase != P.RUNNING:
        raise TransitionError(preempt_refusal(job))
    job = job.evolve()
    status = job.status
    status.desired_phase = P.PREEMPTED
    status.signal = "preempt"
    status.reason = "preempted"
    status.preemption = PreemptionStatus(
        candidate_job=candidate.id if candidate else None, reason=reason, requested_at=now
    )
    by = f" for job {candidate.id}" if candidate else ""
    set_condition(
        status, "PreemptionRequested", True, reason.capitalize(), f"preempted{by}", now=now
    )
    event = EventRecord(
        "auto_preempt",
        job=job.id,
        worker=status.worker,
        fields={
            "candidate_job": candidate.id if candidate else None,
            "reason": reason,
            "priority": status.effective.priority,
            "candidate_priority": candidate.status.effective.priority if candidate else None,
        },
    )
    return job, [event]


def nominate(job: Job, worker: str, now: datetime) -> tuple[Job, Events]:
    """Capacity on `worker` is being freed for this queued job: the scheduler holds it."""
    allowed(Verb.NOMINATE, job)
    if job.status.nominated_worker == worker:
        return job, []
    job = job.evolve()
    job.status.nominated_worker = worker
    message = f"capacity on {worker} held"
    set_condition(job.status, "Nominated", True, "CapacityFreed", message, now=now)
    return job, []


def release_nomination(job: Job) -> tuple[Job, Events]:
    """The capacity held for this queued job is no more (its worker cordoned or lost)."""
    if job.status.nominated_worker is None:
        return job, []
    job = job.evolve()
    job.status.nominated_worker = None
    job.status.nominated_workers = []
    return job, []


def record_checkpoint_dir(job: Job, path: str | None) -> tuple[Job, Events]:
    """Where the worker put this run's checkpoints, as its `started` report says."""
    if not path or job.status.checkpoint_dir == path:
        return job, []
    return _recorded(job, checkpoint_dir=path), []


def record_cpuset(job: Job, cpuset: list[int] | None) -> tuple[Job, Events]:
    """The cores this run is pinned to, as its `started` report says (a run that says
    none was not pinned: an earlier attempt's cores are not kept)."""
    if job.status.cpuset == cpuset:
        return job, []
    return _recorded(job, cpuset=cpuset), []


def record_checkpoint_latest(job: Job, path: str | None) -> tuple[Job, Events]:
    """The newest checkpoint the workload wrote, as its `complete` report says; a finished
    job's is kept as it ended."""
    if not path or job.status.phase.terminal:
        return job, []
    return _recorded(job, checkpoint_latest=path), []


def _recorded(job: Job, **said: str | list[int] | None) -> Job:
    """`job` with fields of its status replaced by what a report says, a shallow copy.

    The report's own move (start, complete) follows at once and makes its deep copy
    (Job.evolve) before it changes anything, so a deep copy here would be the second
    of one report (each about as costly as parsing the job); a copy that replaces only
    top-level fields of the status leaves the original as it was.
    """
    return job.model_copy(update={"status": job.status.model_copy(update=said)})


def mark_resumed(job: Job, resumed_by: int) -> tuple[Job, Events]:
    """The preempted job points at the job that resumes it."""
    allowed(Verb.RESUME, job)
    job = job.evolve()
    job.status.resumed_by = resumed_by
    return job, []


# Worker reports


def fence(job: Job, worker: str, attempt: int | None, rank: int = 0) -> None:
    """Refuse a report from another worker than the job's, or about another run of it.

    The fence comes before anything else a report does, whatever the job's phase: a
    report of a run that was superseded (the job unbound and bound again, even to the
    same worker) must change nothing. A report without an attempt (an agent older than
    fencing) is judged by its worker alone. A multi-host job's report must come from the
    worker of the member (`rank`) it says it is; a job of one node has rank 0 only.
    """
    members = job.status.members
    bound = job.status.worker if not members else _member_worker(members, rank)
    if bound != worker or (rank and not members):
        said = f"member {rank} of job {job.id}" if rank else f"job {job.id}"
        raise TransitionError(f"{said} is bound to {bound!r}, not {worker!r}; report refused")
    if attempt is not None and attempt != job.status.attempt:
        raise TransitionError(
            f"job {job.id} is on attempt {job.status.attempt}; "
            f"a report of attempt {attempt} is refused"
        )


def _member_worker(members: list[Member], rank: int) -> str | None:
    return members[rank].worker if rank < len(members) else None


def start(
    job: Job, worker: str, now: datetime, attempt: int | None = None, rank: int = 0
) -> tuple[Job, Events]:
    """The workload runs: a Scheduled job starts, a Lost one is recovered."""
    fence(job, worker, attempt, rank)
    if job.status.phase in allowed(Verb.STARTED, job):
        return job, []  # a retried report
    job = job.evolve()
    recovered = job.status.phase == P.LOST
    job.status.phase = P.RUNNING
    job.status.lost_at = None
    job.status.started_at = job.status.started_at or now
    set_condition(job.status, "Running", True, "Recovered" if recovered else "Started", now=now)
    name = "job_recovered" if recovered else "job_started"
    return job, [EventRecord(name, job=job.id, worker=worker)]


def stopping(
    job: Job, worker: str, now: datetime, attempt: int | None = None, rank: int = 0
) -> tuple[Job, Events]:
    """The worker has sent SIGTERM: Preempting or Cancelling, as the signal says."""
    fence(job, worker, attempt, rank)
    to = allowed(Verb.STOPPING, job)
    target = _STOP_TARGET.get(job.status.signal or "")
    if job.status.desired_phase == P.FAILED:
        target = None  # a gang stopping its members after one failed: it ends Failed
    if target is None or target not in to or target == job.status.phase:
        return job, []
    job = job.evolve()
    job.status.phase = target
    job.status.stopping_at = now
    return job, []


def complete(
    job: Job,
    worker: str,
    exit_code: int | None,
    exit_signal: int | None,
    now: datetime,
    attempt: int | None = None,
    failure: tuple[str, str] | None = None,
    rank: int = 0,
) -> tuple[Job, Events]:
    """The workload exited; the final phase follows from the desired one and the exit.

    `failure` (reason, message) is the worker's word where no exit code can say it: the job
    could not start (start_failed) or its end was never recorded (host_restarted).
    """
    fence(job, worker, attempt, rank)
    if job.status.phase in TERMINAL_PHASES:
        return job, []  # a retried or late report: what was decided stays decided
    allowed(Verb.COMPLETE, job)
    job = job.evolve()
    job.status.exit_code, job.status.exit_signal = exit_code, exit_signal
    desired = job.status.desired_phase
    phase: Phase
    if desired in (P.PREEMPTED, P.CANCELLED):
        phase = desired
        reason = job.status.reason or ("preempted" if desired == P.PREEMPTED else "user")
    elif desired == P.FAILED and job.status.reason:
        # Driven to Failed (a hang guard): however it exited, it ends as it was driven.
        phase, reason = P.FAILED, job.status.reason
    elif failure is not None:
        # Retried only as a lost run (on_lost): a host that restarted under the job lost
        # it, as a lost worker does; a job that could not start, or filled the disk,
        # would do so again.
        reason, job.status.message = failure
        if reason in _UNRECORDED_ENDS:
            return job, _fail_or_retry(job, now, reason, lost=True)
        phase = P.FAILED
    elif exit_code == 0:
        phase, reason = P.SUCCEEDED, "exit 0"
    else:
        reason = f"signal {exit_signal}" if exit_signal else f"exit code {exit_code}"
        return job, _fail_or_retry(job, now, reason)
    return job, _end(job, phase, now, reason)


# A run whose end was never recorded (its host restarted, its supervisor vanished) was
# lost, as with a lost worker: retried only `on_lost`.
_UNRECORDED_ENDS = frozenset({"host_restarted", "supervisor_lost"})


def checkpoint_complete(
    job: Job, worker: str, now: datetime, attempt: int | None = None, rank: int = 0
) -> tuple[Job, Events]:
    """The sentinel was seen: recorded once, the flag being the retry's dedup key (a
    gang's comes here once every member saw it: gangs.checkpoint_complete)."""
    fence(job, worker, attempt, rank)
    preemption = job.status.preemption
    if preemption is None:
        raise TransitionError(f"job {job.id} is not being preempted; no checkpoint was asked for")
    allowed(Verb.CHECKPOINT_COMPLETE, job)
    if preemption.checkpoint_complete:
        return job, []
    job = job.evolve()
    assert job.status.preemption is not None
    job.status.preemption.checkpoint_complete = True
    members = len(job.status.members)
    message = f"seen by all {members} members" if members else f"seen by {worker}"
    set_condition(job.status, "CheckpointComplete", True, "SentinelSeen", message, now=now)
    fields = {"candidate_job": preemption.candidate_job}
    return job, [EventRecord("checkpoint_complete", job=job.id, worker=worker, fields=fields)]


def progress(
    job: Job, worker: str, sample: Sample, now: datetime, attempt: int | None = None, rank: int = 0
) -> tuple[Job, Events]:
    """The workload's newest progress line: status.progress, with no event (a line a
    second would flood events.jsonl). A job that ended keeps what it had; a multi-host
    job's progress is rank 0's alone (the others' lines are in their logs)."""
    fence(job, worker, attempt, rank)
    allowed(Verb.PROGRESS, job)
    if rank or job.status.phase in TERMINAL_PHASES:
        return job, []
    job = job.evolve()
    job.status.progress = progress_math.advance(job.status.progress, sample, now)
    return job, []


# What the reconcile loops decide


def bind(job: Job, worker: str, gpus: list[int], now: datetime) -> tuple[Job, Events]:
    """The scheduler gives a ready Pending job a worker (and GPUs on it)."""
    allowed(Verb.BIND, job)
    job = job.evolve()
    status = job.status
    status.phase, status.worker = P.SCHEDULED, worker
    status.attempt += 1  # a new run: reports of any earlier one are fenced off
    status.scheduled_at = now
    if status.nominated_worker is not None:
        message = "the held capacity was taken"
        set_condition(status, "Nominated", False, "Bound", message, now=now)
    status.nominated_worker = None
    status.gpus = gpus
    set_condition(status, "Scheduled", True, "Bound", f"bound to {worker}", now=now)
    fields = {"gpus": status.gpus, "attempt": status.attempt}
    return job, [EventRecord("job_scheduled", job=job.id, worker=worker, fields=fields)]


def unbind(job: Job, now: datetime | None = None) -> tuple[Job, Events]:
    """Its worker's lease expired before it started: back to the queue."""
    allowed(Verb.UNBIND, job)
    worker = job.status.worker
    job = job.evolve()
    job.status.phase, job.status.worker, job.status.gpus = P.PENDING, None, []
    if job.status.members:
        ungang(job.status)
    message = f"back in the queue: worker {worker} was lost before it started the job"
    waits(job.status, WaitReason.WAITING_FOR_CAPACITY, message, now)
    return job, [EventRecord("job_unbound", job=job.id, worker=worker)]


def lose(job: Job, now: datetime) -> tuple[Job, Events]:
    """Its worker's lease expired while it ran: Lost, until the worker returns or time runs out."""
    allowed(Verb.LOSE, job)
    job = job.evolve()
    job.status.phase, job.status.lost_at = P.LOST, now
    return job, [EventRecord("job_lost", job=job.id, worker=job.status.worker)]


def lost_timeout(job: Job, now: datetime) -> tuple[Job, Events]:
    """Lost too long: it ends as it was driven, else Failed."""
    allowed(Verb.LOST_TIMEOUT, job)
    job = job.evolve()
    job.status.message = f"worker {job.status.worker} did not come back"
    return job, _ended_unseen(job, now, "worker_lost")


def dependencies_met(job: Job, now: datetime) -> tuple[Job, Events]:
    """Every parent ended as required: the job joins the queue now."""
    allowed(Verb.DEPENDENCIES_MET, job)
    job = job.evolve()
    job.status.dependencies_met = True
    job.status.queued_at = now
    set_condition(job.status, "DependenciesMet", True, "ParentsEnded", now=now)
    _queued_again(job.status, WaitReason.WAITING_FOR_DEPENDENCIES.value, now)
    return job, []


def dependency_failed(job: Job, culprit: str, now: datetime) -> tuple[Job, Events]:
    """A parent ended badly (or is gone): its input never materialised."""
    allowed(Verb.DEPENDENCY_FAILED, job)
    job = job.evolve()
    job.status.message = f"parent {culprit} did not succeed"
    return job, _end(job, P.CANCELLED, now, "dependency_failed")


def process_vanished(job: Job, now: datetime) -> tuple[Job, Events]:
    """Its worker no longer runs it and never reported its end."""
    allowed(Verb.PROCESS_VANISHED, job)
    job = job.evolve()
    job.status.message = f"worker {job.status.worker} no longer runs it"
    return job, _ended_unseen(job, now, "process_vanished")


def _ended_unseen(job: Job, now: datetime, reason: str) -> Events:
    """A run nobody saw end: as it was driven, else Failed (or retried, with on_lost)."""
    phase = _desired_end(job)
    if phase == P.FAILED:
        return _fail_or_retry(job, now, reason, lost=True)
    return _end(job, phase, now, reason)


def unschedulable(job: Job, message: str, now: datetime) -> tuple[Job, Events]:
    """No worker could run this queued job: said by a condition, the event said once."""
    allowed(Verb.PLACEABILITY, job)
    held = _scheduled_condition(job)
    if held is not None and held.reason == _UNSCHEDULABLE and held.message == message:
        return job, []
    job = job.evolve()
    set_condition(job.status, "Scheduled", False, _UNSCHEDULABLE, message, now=now)
    if held is not None and held.reason == _UNSCHEDULABLE:
        return job, []  # the same verdict, said anew (the largest worker changed)
    fields = {"message": message}
    return job, [EventRecord("job_unschedulable", job=job.id, fields=fields)]


def placeable(job: Job, now: datetime | None = None) -> tuple[Job, Events]:
    """Some worker could run it now: the Unschedulable condition goes, and the job says
    what it waits for instead (its parents, its backoff, else room)."""
    allowed(Verb.PLACEABILITY, job)
    held = _scheduled_condition(job)
    if held is None or held.reason != _UNSCHEDULABLE:
        return job, []
    job = job.evolve()
    status = job.status
    if status.retry_at is not None:
        waits(status, WaitReason.RETRY_BACKOFF, f"run again at {status.retry_at.isoformat()}", now)
    elif not status.dependencies_met:
        waits(status, WaitReason.WAITING_FOR_DEPENDENCIES, PARENTS_WAITED, now)
    else:
        waits(status, WaitReason.WAITING_FOR_CAPACITY, ROOM_TAKEN, now)
    return job, []


_UNSCHEDULABLE = WaitReason.UNSCHEDULABLE.value


def _scheduled_condition(job: Job) -> Condition | None:
    return next((c for c in job.status.conditions if c.type == "Scheduled"), None)


def time_out(job: Job, reason: str, message: str, now: datetime) -> tuple[Job, Events]:
    """A hang guard ran out: Failed with its `reason`, through SIGTERM and grace if it runs.

    A queued job ends at once. A running one gets desired phase Failed and
    `signal=timeout`: its worker stops it as it would a cancel (SIGTERM, the job's grace,
    SIGKILL) and its `complete` then ends it Failed with this reason (`complete`).
    A job already driven elsewhere (cancelled, preempted) is left to that.
    """
    allowed(Verb.TIME_OUT, job)
    if job.status.desired_phase != P.RUNNING:
        return job, []
    job = job.evolve()
    set_condition(job.status, "TimedOut", True, reason, message, now=now)
    event = EventRecord(
        "job_timed_out",
        job=job.id,
        worker=job.status.worker,
        fields={"reason": reason, "message": message},
    )
    if job.status.phase == P.PENDING:
        job.status.message = message
        return job, [event, *_end(job, P.FAILED, now, reason)]
    job.status.desired_phase = P.FAILED
    job.status.signal = "timeout"
    job.status.reason, job.status.message = reason, message
    return job, [event]


def quota_exceeded(job: Job, message: str, now: datetime) -> tuple[Job, Events]:
    """A queued job held back by its project's quota or its owner's running limit
    (quotas.py): `Scheduled=False, reason=QuotaExceeded`. A job no worker could ever run
    keeps saying so (Unschedulable is the stronger word)."""
    allowed(Verb.PLACEABILITY, job)
    held = _scheduled_condition(job)
    if held is not None and (
        held.reason == _UNSCHEDULABLE or (held.reason == QUOTA_EXCEEDED and held.message == message)
    ):
        return job, []
    job = job.evolve()
    set_condition(job.status, "Scheduled", False, QUOTA_EXCEEDED, message, now=now)
    return job, []


def within_quota(job: Job, now: datetime | None = None) -> tuple[Job, Events]:
    """Its quota no longer holds this queued job back: it waits for room now
    (WaitingForCapacity), as every queued job says why it waits."""
    allowed(Verb.PLACEABILITY, job)
    held = _scheduled_condition(job)
    if held is None or held.reason != QUOTA_EXCEEDED:
        return job, []
    job = job.evolve()
    _queued_again(job.status, QUOTA_EXCEEDED, now)
    return job, []


# Multi-host jobs (gangs): placed whole, by one decision and one write


def bind_gang(job: Job, members: list[Member], now: datetime) -> tuple[Job, Events]:
    """The scheduler gives a ready Pending gang its N workers at once, one member each
    (`members`, rank order: rank 0's worker and GPUs are `status.worker` and `gpus`).
    One run, one attempt for the whole group, as `bind` makes for a job of one node."""
    allowed(Verb.BIND, job)
    job = job.evolve()
    status = job.status
    first = members[0]
    status.phase, status.worker, status.gpus = P.SCHEDULED, first.worker, first.gpus
    status.members = members
    status.master_port = status.failed_rank = None  # an earlier run's, if any
    status.attempt += 1  # a new run: reports of any earlier one are fenced off
    status.scheduled_at = now
    if status.nominated_worker is not None:
        message = "the held capacity was taken"
        set_condition(status, "Nominated", False, "Bound", message, now=now)
    status.nominated_worker, status.nominated_workers = None, []
    workers = [m.worker for m in members]
    set_condition(status, "Scheduled", True, "Bound", f"bound to {', '.join(workers)}", now=now)
    fields = {"gpus": status.gpus, "attempt": status.attempt, "workers": workers}
    return job, [EventRecord("job_scheduled", job=job.id, worker=first.worker, fields=fields)]


def nominate_gang(job: Job, workers: list[str], now: datetime) -> tuple[Job, Events]:
    """Capacity on each of `workers` is being freed for this queued gang: the scheduler
    holds it there, one member's room on each (`nominated_worker` is the first)."""
    allowed(Verb.NOMINATE, job)
    if job.status.nominated_workers == workers:
        return job, []
    job = job.evolve()
    job.status.nominated_worker, job.status.nominated_workers = workers[0], list(workers)
    message = f"capacity on {', '.join(workers)} held"
    set_condition(job.status, "Nominated", True, "CapacityFreed", message, now=now)
    return job, []
