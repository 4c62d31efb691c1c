"""What each transition writes: the phase, the desired phase, the status fields the
loops and the CLI read, and the events, at the time it is handed (never the clock's)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from jobd.api.models import Job, JobSpec, ObjectMeta, Phase, PreemptionStatus
from jobd.controllers import transitions
from jobd.store.base import EventRecord
from tests.unit.conftest import NOW, job_in

LATER = NOW + timedelta(minutes=5)


def names(events: list[EventRecord]) -> list[str]:
    return [e.event for e in events]


def test_bind_gives_worker_and_gpus_and_takes_the_held_capacity() -> None:
    job = job_in(Phase.PENDING, worker=None, nominated_worker="w2")
    bound, events = transitions.bind(job, "w2", [1], LATER)
    s = bound.status
    assert (s.phase, s.desired_phase, s.worker, s.gpus) == (
        Phase.SCHEDULED,
        Phase.RUNNING,
        "w2",
        [1],
    )
    assert s.scheduled_at == LATER and s.nominated_worker is None
    conditions = {c.type: (c.status, c.last_transition_time) for c in s.conditions}
    assert conditions == {"Scheduled": ("True", LATER), "Nominated": ("False", LATER)}
    assert [(e.event, e.worker, e.fields) for e in events] == [
        ("job_scheduled", "w2", {"gpus": [1], "attempt": 1})
    ]
    assert s.attempt == 1, "the first bind is the first attempt"


def test_unbind_and_lose_follow_an_expired_lease() -> None:
    unbound, events = transitions.unbind(job_in(Phase.SCHEDULED, gpus=[0]))
    assert (unbound.status.phase, unbound.status.worker, unbound.status.gpus) == (
        Phase.PENDING,
        None,
        [],
    )
    assert [(e.event, e.worker) for e in events] == [("job_unbound", "w")]
    lost, events = transitions.lose(job_in(Phase.RUNNING), LATER)
    assert (lost.status.phase, lost.status.lost_at) == (Phase.LOST, LATER)
    assert [(e.event, e.worker) for e in events] == [("job_lost", "w")]


def test_start_and_recover() -> None:
    started, events = transitions.start(job_in(Phase.SCHEDULED, started_at=None), "w", LATER)
    assert (started.status.phase, started.status.started_at) == (Phase.RUNNING, LATER)
    assert names(events) == ["job_started"]
    recovered, events = transitions.start(job_in(Phase.LOST), "w", LATER)
    s = recovered.status
    assert (s.phase, s.lost_at, s.started_at) == (Phase.RUNNING, None, NOW)
    assert names(events) == ["job_recovered"]
    assert [c.reason for c in s.conditions if c.type == "Running"] == ["Recovered"]


@pytest.mark.parametrize(
    ("signal", "phase"), [("preempt", Phase.PREEMPTING), ("cancel", Phase.CANCELLING)]
)
def test_stopping_goes_where_the_signal_says(signal: str, phase: Phase) -> None:
    stopping, events = transitions.stopping(job_in(Phase.RUNNING, signal=signal), "w", LATER)
    assert (stopping.status.phase, stopping.status.stopping_at, events) == (phase, LATER, [])


@pytest.mark.parametrize(
    ("desired", "exit_code", "exit_signal", "phase", "reason"),
    [
        (Phase.RUNNING, 0, None, Phase.SUCCEEDED, "exit 0"),
        (Phase.RUNNING, 3, None, Phase.FAILED, "exit code 3"),
        (Phase.RUNNING, None, 9, Phase.FAILED, "signal 9"),
        (Phase.PREEMPTED, 0, None, Phase.PREEMPTED, "preempted"),
        (Phase.CANCELLED, None, 15, Phase.CANCELLED, "user"),
    ],
)
def test_complete_ends_as_driven_else_by_the_exit(
    desired: Phase, exit_code: int | None, exit_signal: int | None, phase: Phase, reason: str
) -> None:
    job = job_in(Phase.RUNNING, desired_phase=desired)
    ended, events = transitions.complete(job, "w", exit_code, exit_signal, LATER)
    s = ended.status
    assert (s.phase, s.desired_phase, s.reason, s.finished_at) == (phase, phase, reason, LATER)
    assert (s.exit_code, s.exit_signal) == (exit_code, exit_signal)
    expected = ["job_finished"] + (["job_cancelled"] if phase == Phase.CANCELLED else [])
    assert names(events) == expected
    assert events[0].fields == {"phase": phase.value, "exit_code": exit_code}


def test_cancel_ends_a_job_nothing_runs_and_signals_one_that_runs() -> None:
    ended, events = transitions.cancel(job_in(Phase.PENDING), LATER)
    assert (ended.status.phase, ended.status.desired_phase) == (Phase.CANCELLED, Phase.CANCELLED)
    assert names(events) == ["job_finished", "job_cancelled"]
    assert events[1].fields == {"reason": "user"}
    running, events = transitions.cancel(job_in(Phase.RUNNING), LATER, reason="admin")
    s = running.status
    assert (s.phase, s.desired_phase, s.signal, s.reason, events) == (
        Phase.RUNNING,
        Phase.CANCELLED,
        "cancel",
        "admin",
        [],
    )


def test_a_cancel_while_preempting_keeps_the_preempt_signal() -> None:
    job = job_in(Phase.PREEMPTING, signal="preempt", desired_phase=Phase.PREEMPTED)
    cancelled, _ = transitions.cancel(job, LATER)
    assert (cancelled.status.signal, cancelled.status.desired_phase) == ("preempt", Phase.CANCELLED)


def test_preemption_request_drives_toward_preempted_and_says_for_whom() -> None:
    candidate = Job(metadata=ObjectMeta(id=9), spec=JobSpec(command=["y"]))
    candidate.status.effective.priority = 50
    job = job_in(Phase.RUNNING)
    job.status.effective.priority = 10
    asked, events = transitions.request_preemption(job, LATER, "sweeper", candidate)
    s = asked.status
    assert (s.phase, s.desired_phase, s.signal, s.reason) == (
        Phase.RUNNING,
        Phase.PREEMPTED,
        "preempt",
        "preempted",
    )
    assert s.preemption == PreemptionStatus(candidate_job=9, reason="sweeper", requested_at=LATER)
    assert [(e.event, e.worker, e.fields) for e in events] == [
        (
            "auto_preempt",
            "w",
            {"candidate_job": 9, "reason": "sweeper", "priority": 10, "candidate_priority": 50},
        )
    ]


@pytest.mark.parametrize(
    ("desired", "phase"),
    [
        (Phase.RUNNING, Phase.FAILED),
        (Phase.PREEMPTED, Phase.PREEMPTED),
        (Phase.CANCELLED, Phase.CANCELLED),
    ],
)
def test_a_job_nobody_saw_end_ends_as_driven_else_failed(desired: Phase, phase: Phase) -> None:
    timed_out, events = transitions.lost_timeout(job_in(Phase.LOST, desired_phase=desired), LATER)
    assert (timed_out.status.phase, timed_out.status.reason) == (phase, "worker_lost")
    assert timed_out.status.message == "worker w did not come back"
    assert events[0].event == "job_finished"
    vanished, _ = transitions.process_vanished(job_in(Phase.RUNNING, desired_phase=desired), LATER)
    assert (vanished.status.phase, vanished.status.reason) == (phase, "process_vanished")
    assert vanished.status.message == "worker w no longer runs it"


def test_dependencies_met_queues_the_job_now_and_a_failed_parent_cancels_it() -> None:
    waiting = job_in(Phase.PENDING, worker=None, dependencies_met=False, queued_at=NOW)
    ready, events = transitions.dependencies_met(waiting, LATER)
    assert (ready.status.phase, ready.status.dependencies_met, ready.status.queued_at) == (
        Phase.PENDING,
        True,
        LATER,
    )
    assert events == []
    cancelled, events = transitions.dependency_failed(waiting, "p/parent", LATER)
    s = cancelled.status
    assert (s.phase, s.reason, s.message) == (
        Phase.CANCELLED,
        "dependency_failed",
        "parent p/parent did not succeed",
    )
    assert [e.fields for e in events if e.event == "job_cancelled"] == [
        {"reason": "dependency_failed"}
    ]


def test_checkpoint_complete_is_recorded_once_with_its_event() -> None:
    job = job_in(Phase.PREEMPTING, preemption=PreemptionStatus(candidate_job=9, requested_at=NOW))
    seen, events = transitions.checkpoint_complete(job, "w", LATER)
    assert seen.status.preemption is not None and seen.status.preemption.checkpoint_complete
    assert seen.status.phase == Phase.PREEMPTING
    assert [(e.event, e.fields) for e in events] == [("checkpoint_complete", {"candidate_job": 9})]


def test_nominate_and_mark_resumed_change_no_phase() -> None:
    nominated, _ = transitions.nominate(job_in(Phase.PENDING, worker=None), "w2", LATER)
    assert (nominated.status.phase, nominated.status.nominated_worker) == (Phase.PENDING, "w2")
    resumed, _ = transitions.mark_resumed(job_in(Phase.PREEMPTED), 8)
    assert (resumed.status.phase, resumed.status.resumed_by) == (Phase.PREEMPTED, 8)


def test_finish_ends_a_copy() -> None:
    job = job_in(Phase.RUNNING)
    ended, events = transitions.finish(job, Phase.FAILED, LATER, "why")
    assert (ended.status.phase, ended.status.desired_phase, ended.status.reason) == (
        Phase.FAILED,
        Phase.FAILED,
        "why",
    )
    assert job.status.phase == Phase.RUNNING
    assert names(events) == ["job_finished"]
