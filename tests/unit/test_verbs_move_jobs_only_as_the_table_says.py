"""The job state machine's table: every verb and report against every phase.

For each pair, the transition either refuses with the table's message or leaves the
job in one of the phases the table allows from there, without touching its input.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from jobd.api.models import Job, Phase, PreemptionStatus
from jobd.controllers import transitions
from jobd.controllers.errors import TransitionError
from jobd.controllers.transitions import TABLE, Verb
from jobd.store.base import EventRecord
from tests.unit.conftest import NOW, job_in

Result = tuple[Job, list[EventRecord]]


# Each verb as its caller uses it, with a plausible input.
APPLY: dict[Verb, Callable[[Job], Result]] = {
    Verb.CANCEL: lambda job: transitions.cancel(job, NOW),
    Verb.PREEMPT: lambda job: transitions.request_preemption(job, NOW, "manual"),
    Verb.NOMINATE: lambda job: transitions.nominate(job, "w2", NOW),
    Verb.RESUME: lambda job: transitions.mark_resumed(job, 8),
    Verb.STARTED: lambda job: transitions.start(job, "w", NOW),
    Verb.STOPPING: lambda job: transitions.stopping(job, "w", NOW),
    Verb.COMPLETE: lambda job: transitions.complete(job, "w", 0, None, NOW),
    Verb.CHECKPOINT_COMPLETE: lambda job: transitions.checkpoint_complete(job, "w", NOW),
    Verb.PROGRESS: lambda job: transitions.progress(job, "w", {"step": 1, "total": 4}, NOW),
    Verb.BIND: lambda job: transitions.bind(job, "w2", [0], NOW),
    Verb.UNBIND: transitions.unbind,
    Verb.LOSE: lambda job: transitions.lose(job, NOW),
    Verb.LOST_TIMEOUT: lambda job: transitions.lost_timeout(job, NOW),
    Verb.DEPENDENCIES_MET: lambda job: transitions.dependencies_met(job, NOW),
    Verb.DEPENDENCY_FAILED: lambda job: transitions.dependency_failed(job, "p/parent", NOW),
    Verb.PROCESS_VANISHED: lambda job: transitions.process_vanished(job, NOW),
    Verb.PLACEABILITY: lambda job: transitions.unschedulable(job, "no worker has 5 GPUs", NOW),
    Verb.TIME_OUT: lambda job: transitions.time_out(job, "MaxRuntimeExceeded", "ran 2 h", NOW),
    Verb.RETRY_READY: lambda job: transitions.retry_ready(job, NOW),
}


def test_the_table_and_the_functions_cover_every_verb() -> None:
    assert set(TABLE) == set(Verb) == set(APPLY)


@pytest.mark.parametrize("phase", list(Phase), ids=str)
@pytest.mark.parametrize("verb", list(Verb), ids=str)
def test_a_verb_moves_a_job_only_where_the_table_allows(verb: Verb, phase: Phase) -> None:
    signal = "preempt" if phase in (Phase.RUNNING, Phase.PREEMPTING) else None
    job = job_in(phase, signal=signal, preemption=PreemptionStatus(requested_at=NOW))
    before = job.model_dump()
    allowed = TABLE[verb].moves.get(phase)
    if allowed is None:
        with pytest.raises(TransitionError) as refused:
            APPLY[verb](job)
        assert str(refused.value) == TABLE[verb].refusal(job)
    else:
        after, _events = APPLY[verb](job)
        assert after.status.phase in allowed
    assert job.model_dump() == before  # pure: the input is never changed


@pytest.mark.parametrize(
    ("verb", "job", "message"),
    [
        (Verb.CANCEL, job_in(Phase.SUCCEEDED), "job 7 is already Succeeded"),
        (Verb.STARTED, job_in(Phase.PENDING), "job 7 is Pending; it cannot start"),
        (
            Verb.PREEMPT,
            job_in(Phase.SCHEDULED),
            "job 7 is Scheduled; only a Running job can be preempted",
        ),
        (
            Verb.PREEMPT,
            job_in(Phase.RUNNING, desired_phase=Phase.CANCELLED),
            "job 7 is Running (already being driven to Cancelled); "
            "only a Running job can be preempted",
        ),
        (
            Verb.PREEMPT,
            job_in(Phase.PREEMPTING, desired_phase=Phase.PREEMPTED),
            "job 7 is Preempting (already being driven to Preempted); "
            "only a Running job can be preempted",
        ),
        (
            Verb.PREEMPT,
            job_in(Phase.FAILED),
            "job 7 is Failed; only a Running job can be preempted",
        ),
        (Verb.NOMINATE, job_in(Phase.RUNNING), "job 7 is Running, not queued"),
        (Verb.RESUME, job_in(Phase.FAILED), "job 7 is Failed; only a Preempted job resumes"),
    ],
    ids=lambda v: str(v) if isinstance(v, Verb) else "",
)
def test_a_refusal_says_what_the_cli_shows(verb: Verb, job: Job, message: str) -> None:
    with pytest.raises(TransitionError) as refused:
        APPLY[verb](job)
    assert str(refused.value) == message


@pytest.mark.parametrize("verb", [Verb.STARTED, Verb.STOPPING, Verb.COMPLETE])
def test_a_report_from_another_worker_is_refused(verb: Verb) -> None:
    job = job_in(Phase.RUNNING, worker="elsewhere")
    with pytest.raises(TransitionError, match="bound to 'elsewhere', not 'w'; report refused"):
        APPLY[verb](job)


def test_a_checkpoint_nobody_asked_for_or_from_another_worker_is_refused() -> None:
    with pytest.raises(TransitionError, match="not being preempted"):
        transitions.checkpoint_complete(job_in(Phase.PREEMPTING), "w", NOW)
    asked = job_in(Phase.PREEMPTING, preemption=PreemptionStatus(requested_at=NOW))
    with pytest.raises(TransitionError, match=r"bound to 'w', not 'x'; report refused$"):
        transitions.checkpoint_complete(asked, "x", NOW)


def test_a_finished_job_refuses_a_report_from_elsewhere_and_stays_as_decided() -> None:
    ended = job_in(Phase.PREEMPTED, worker="elsewhere")
    with pytest.raises(TransitionError, match="bound to 'elsewhere', not 'w'"):
        transitions.complete(ended, "w", 0, None, NOW)
    assert ended.status.phase == Phase.PREEMPTED


@pytest.mark.parametrize(
    ("verb", "job"),
    [
        (Verb.STARTED, job_in(Phase.RUNNING)),  # a retried `started`
        (Verb.STARTED, job_in(Phase.CANCELLING)),
        (Verb.STOPPING, job_in(Phase.PREEMPTING, signal="preempt")),  # already there
        (Verb.STOPPING, job_in(Phase.RUNNING)),  # no signal: nothing to stop for
        (Verb.STOPPING, job_in(Phase.CANCELLED)),
        (Verb.COMPLETE, job_in(Phase.SUCCEEDED)),  # what was decided stays decided
        (Verb.COMPLETE, job_in(Phase.PREEMPTED)),
        (Verb.NOMINATE, job_in(Phase.PENDING, nominated_worker="w2")),
        (
            Verb.CHECKPOINT_COMPLETE,
            job_in(
                Phase.PREEMPTING,
                preemption=PreemptionStatus(requested_at=NOW, checkpoint_complete=True),
            ),
        ),
    ],
    ids=lambda v: str(v) if isinstance(v, Verb) else "",
)
def test_what_is_already_so_comes_back_unchanged_to_write_nothing(verb: Verb, job: Job) -> None:
    after, events = APPLY[verb](job)
    assert after is job
    assert events == []
