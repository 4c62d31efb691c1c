"""The job state machine's table: which verb may move a job from which phase to which.

One row per verb a user sends, report a worker sends, or decision a reconcile loop makes;
in each, the phases the verb applies to and the phases it may leave the job in. A verb
asked of a job in any other phase is refused with the row's message (a TransitionError,
HTTP 409, shown by the CLI). The functions that make the moves are in transitions.py;
each asks `allowed()` first. Adding a phase: add it to `Phase` (api/models.py) and say
here what each verb does from it; the unit test walks every phase against every verb.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from jobd.api.models import TERMINAL_PHASES, Job, Phase
from jobd.controllers.errors import TransitionError

__all__ = ["TABLE", "Rule", "Verb", "allowed", "preempt_refusal"]


class Verb(enum.StrEnum):
    # What users ask for (broker/routes/jobs.py), and what the sweeper asks for them.
    CANCEL = "cancel"
    PREEMPT = "preempt"
    NOMINATE = "nominate"  # hold freed capacity for a queued job (preempt-blockers, sweeper)
    RESUME = "resume"
    # What a worker reports (broker/routes/workers.py); `started` also recovers a Lost job.
    STARTED = "started"
    STOPPING = "stopping"
    COMPLETE = "complete"
    CHECKPOINT_COMPLETE = "checkpoint-complete"
    PROGRESS = "progress"
    # What the reconcile loops decide.
    BIND = "bind"
    UNBIND = "unbind"
    LOSE = "lose"
    LOST_TIMEOUT = "lost-timeout"
    DEPENDENCIES_MET = "dependencies-met"
    DEPENDENCY_FAILED = "dependency-failed"
    PROCESS_VANISHED = "process-vanished"
    PLACEABILITY = "placeability"  # said unschedulable, or no longer (placement.py)
    TIME_OUT = "time-out"  # a hang guard ran out (guards.py)
    RETRY_READY = "retry-ready"  # a retried job's backoff is over (retries.py)


@dataclass(frozen=True)
class Rule:
    """From each phase the verb applies to, the phases it may leave the job in.

    A phase that may go to itself is one the verb leaves as it is (a retried report),
    or where it only changes the desired phase (cancel of a running job). A phase
    missing from `moves` is refused with `refusal(job)` as the TransitionError's message.
    """

    moves: Mapping[Phase, frozenset[Phase]]
    refusal: Callable[[Job], str]


P = Phase
_ENDS = frozenset(TERMINAL_PHASES)
_ENDS_BUT_SUCCESS = _ENDS - {P.SUCCEEDED}
# A failed attempt of a job with spec.retry goes back to the queue instead (transitions.retry).
_ENDS_OR_RETRY = _ENDS | {P.PENDING}
_FAILS_OR_RETRY = _ENDS_BUT_SUCCESS | {P.PENDING}
_STARTED = (P.RUNNING, P.PREEMPTING, P.CANCELLING)


def _to(*phases: Phase) -> frozenset[Phase]:
    return frozenset(phases)


def _stay(*phases: Phase) -> dict[Phase, frozenset[Phase]]:
    return {p: _to(p) for p in phases}


def _does_not_apply(verb: str) -> Callable[[Job], str]:
    # Only the loops use these verbs, on jobs they picked by phase: a refusal is a bug.
    return lambda job: f"job {job.id} is {job.status.phase}; {verb} does not apply"


def preempt_refusal(job: Job) -> str:
    """Why `job preempt` is refused: where the job is, and where it is already driven."""
    state = str(job.status.phase)
    if job.status.desired_phase != P.RUNNING and not job.status.phase.terminal:
        state = f"{job.status.phase} (already being driven to {job.status.desired_phase})"
    return f"job {job.id} is {state}; only a Running job can be preempted"


TABLE: Mapping[Verb, Rule] = {
    Verb.CANCEL: Rule(
        {P.PENDING: _to(P.CANCELLED), P.LOST: _to(P.CANCELLED)} | _stay(P.SCHEDULED, *_STARTED),
        lambda job: f"job {job.id} is already {job.status.phase}",
    ),
    # Also refused, whatever the phase, when the job is already driven elsewhere.
    Verb.PREEMPT: Rule(_stay(P.RUNNING), preempt_refusal),
    Verb.NOMINATE: Rule(
        _stay(P.PENDING), lambda job: f"job {job.id} is {job.status.phase}, not queued"
    ),
    Verb.RESUME: Rule(
        _stay(P.PREEMPTED),
        lambda job: f"job {job.id} is {job.status.phase}; only a Preempted job resumes",
    ),
    Verb.STARTED: Rule(
        {P.SCHEDULED: _to(P.RUNNING), P.LOST: _to(P.RUNNING)} | _stay(*_STARTED),
        lambda job: f"job {job.id} is {job.status.phase}; it cannot start",
    ),
    # Where `status.signal` says; without one, nowhere.
    Verb.STOPPING: Rule(
        {p: _to(p, P.PREEMPTING, P.CANCELLING) for p in (P.SCHEDULED, P.RUNNING, P.LOST)}
        | _stay(P.PREEMPTING, P.CANCELLING, *_ENDS),
        lambda job: f"job {job.id} is {job.status.phase}; it never started, so it cannot stop",
    ),
    Verb.COMPLETE: Rule(
        {p: _ENDS_OR_RETRY for p in (P.SCHEDULED, *_STARTED, P.LOST)} | _stay(*_ENDS),
        lambda job: f"job {job.id} is {job.status.phase}; it never started, so it cannot end",
    ),
    # Pure observability: every phase stays (its refusals are about the preemption).
    Verb.CHECKPOINT_COMPLETE: Rule(_stay(*P), _does_not_apply("checkpoint-complete")),
    # Observability too: kept while the job is bound, ignored once it ended.
    Verb.PROGRESS: Rule(
        _stay(P.SCHEDULED, *_STARTED, P.LOST, *_ENDS),
        lambda job: f"job {job.id} is {job.status.phase}; it is not running, so no progress",
    ),
    Verb.BIND: Rule({P.PENDING: _to(P.SCHEDULED)}, _does_not_apply("bind")),
    Verb.UNBIND: Rule({P.SCHEDULED: _to(P.PENDING)}, _does_not_apply("unbind")),
    Verb.LOSE: Rule({p: _to(P.LOST) for p in _STARTED}, _does_not_apply("lose")),
    Verb.LOST_TIMEOUT: Rule({P.LOST: _FAILS_OR_RETRY}, _does_not_apply("lost-timeout")),
    Verb.DEPENDENCIES_MET: Rule(_stay(P.PENDING), _does_not_apply("dependencies-met")),
    Verb.DEPENDENCY_FAILED: Rule(
        {P.PENDING: _to(P.CANCELLED)}, _does_not_apply("dependency-failed")
    ),
    Verb.PROCESS_VANISHED: Rule(
        {p: _FAILS_OR_RETRY for p in (*_STARTED, P.LOST)}, _does_not_apply("process-vanished")
    ),
    Verb.PLACEABILITY: Rule(_stay(P.PENDING), _does_not_apply("placeability")),
    # A queued job ends at once; a running one is driven to Failed (SIGTERM, grace).
    Verb.TIME_OUT: Rule(
        {P.PENDING: _to(P.FAILED), P.RUNNING: _to(P.RUNNING)}, _does_not_apply("time-out")
    ),
    Verb.RETRY_READY: Rule(_stay(P.PENDING), _does_not_apply("retry-ready")),
}


def allowed(verb: Verb, job: Job) -> frozenset[Phase]:
    """Where `verb` may take `job` from its phase; TransitionError if it may not apply."""
    rule = TABLE[verb]
    to = rule.moves.get(job.status.phase)
    if to is None:
        raise TransitionError(rule.refusal(job))
    return to
