"""Hang guards, in memory: the soonest deadline, and a time-out's moves and events."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

from jobd.api.models import Phase
from jobd.controllers import transitions
from jobd.controllers.guards import guarded, soonest_deadline
from tests.unit.conftest import NOW, job_in


def _silent(seconds: float) -> Callable[[datetime], float]:
    """Silent for `seconds`, whenever asked."""
    return lambda _since: seconds


def test_no_limit_no_deadline() -> None:
    assert soonest_deadline(job_in(Phase.RUNNING), NOW, _silent(1e9)) is None
    assert not guarded(job_in(Phase.RUNNING))


def test_the_soonest_guard_is_the_one_that_speaks() -> None:
    job = job_in(Phase.RUNNING, started_at=NOW - timedelta(seconds=100))
    job.status.effective.max_runtime_s = 3600
    job.status.effective.idle_timeout_s = 120
    deadline = soonest_deadline(job, NOW, _silent(90))
    assert deadline is not None
    assert (deadline.reason, deadline.remaining_s) == ("IdleTimeout", 30)
    runtime = soonest_deadline(job, NOW + timedelta(hours=1), _silent(0))
    assert runtime is not None and runtime.reason == "MaxRuntimeExceeded"
    assert runtime.remaining_s == -100


def test_max_pending_counts_from_the_queue_and_only_while_queued() -> None:
    job = job_in(Phase.PENDING, queued_at=NOW - timedelta(seconds=50))
    job.status.effective.max_pending_s = 60
    deadline = soonest_deadline(job, NOW, _silent(0))
    assert deadline is not None and (deadline.reason, deadline.remaining_s) == (
        "PendingTimeout",
        10,
    )
    job.status.dependencies_met = False  # waiting for parents is not waiting in the queue
    assert soonest_deadline(job, NOW, _silent(0)) is None
    running = job_in(Phase.RUNNING)
    running.status.effective.max_pending_s = 60
    assert soonest_deadline(running, NOW, _silent(0)) is None


def test_a_job_driven_elsewhere_is_left_alone() -> None:
    job = job_in(Phase.RUNNING, desired_phase=Phase.CANCELLED)
    job.status.effective.max_runtime_s = 1
    assert soonest_deadline(job, NOW + timedelta(hours=1), _silent(0)) is None
    assert not guarded(job)
    assert transitions.time_out(job, "MaxRuntimeExceeded", "ran", NOW) == (job, [])


def test_a_queued_job_times_out_straight_to_failed() -> None:
    job = job_in(Phase.PENDING, worker=None, started_at=None)
    ended, events = transitions.time_out(job, "PendingTimeout", "queued for 60 s", NOW)
    assert (ended.status.phase, ended.status.reason) == (Phase.FAILED, "PendingTimeout")
    assert [e.event for e in events] == ["job_timed_out", "job_finished"]
    assert events[0].fields == {"reason": "PendingTimeout", "message": "queued for 60 s"}


def test_a_running_job_is_stopped_and_ends_failed_however_it_exits() -> None:
    job = job_in(Phase.RUNNING, attempt=1)
    stopping, events = transitions.time_out(job, "IdleTimeout", "silent for 60 s", NOW)
    assert stopping.status.phase == Phase.RUNNING, "its worker stops it: SIGTERM, grace"
    assert (stopping.status.desired_phase, stopping.status.signal) == (Phase.FAILED, "timeout")
    assert [e.event for e in events] == ["job_timed_out"]
    cond = next(c for c in stopping.status.conditions if c.type == "TimedOut")
    assert (cond.status, cond.reason) == ("True", "IdleTimeout")
    # It checkpointed in its grace and exited 0: still Failed, for the guard's reason.
    ended, _ = transitions.complete(stopping, "w", 0, None, NOW, attempt=1)
    assert (ended.status.phase, ended.status.reason) == (Phase.FAILED, "IdleTimeout")
    assert ended.status.exit_code == 0


def test_a_cancel_during_the_time_outs_grace_ends_it_cancelled() -> None:
    stopping, _ = transitions.time_out(job_in(Phase.RUNNING), "IdleTimeout", "silent", NOW)
    cancelled, _ = transitions.cancel(stopping, NOW)
    ended, _ = transitions.complete(cancelled, "w", None, 15, NOW)
    assert ended.status.phase == Phase.CANCELLED
