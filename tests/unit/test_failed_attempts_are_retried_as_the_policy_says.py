"""spec.retry: which failures run the job again, after which wait, and what is kept.

The state machine's `complete`, `lost_timeout` and `process_vanished` in memory: a failure
the policy takes sends the job back to Pending (not queued before `retry_at`), with the
attempt recorded and the `job_retrying` event; anything else ends it as before.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from pydantic import ValidationError

from jobd.api.models import (
    ADMISSION,
    MAX_ATTEMPTS_KEPT,
    Job,
    JobSpec,
    ObjectMeta,
    Phase,
    RetryPolicy,
)
from jobd.controllers import transitions
from jobd.worker.jobview import JobView
from jobd.worker.settings import WorkerSettings, workload_env
from tests.unit.conftest import NOW, job_in


def running(retry: dict[str, object] | None, **status: object) -> Job:
    job = job_in(Phase.RUNNING, attempt=1, **status)
    spec = {"command": ["x"], **({"retry": retry} if retry is not None else {})}
    return job.model_copy(update={"spec": JobSpec.model_validate(spec)})


def test_the_backoff_doubles_up_to_its_cap() -> None:
    policy = RetryPolicy(limit=10, backoff_s=30, backoff_max_s=600)
    assert [policy.wait_s(n) for n in range(1, 8)] == [30, 60, 120, 240, 480, 600, 600]
    assert RetryPolicy(limit=100, backoff_s=1, backoff_max_s=5).wait_s(100) == 5


def test_a_failed_exit_under_the_limit_goes_back_to_the_queue_after_its_backoff() -> None:
    job = running({"limit": 2, "backoff_s": 10}, checkpoint_latest="/c/7/latest.pt")
    retried, events = transitions.complete(job, "w", 1, None, NOW, attempt=1)
    status = retried.status
    assert status.phase == Phase.PENDING and status.desired_phase == Phase.RUNNING
    assert status.worker is None and status.retries == 1
    assert status.retry_at == NOW + timedelta(seconds=10)
    assert status.resume_from == "/c/7/latest.pt"
    assert [(a.attempt, a.worker, a.exit_code, a.reason) for a in status.attempts] == [
        (1, "w", 1, "exit code 1")
    ]
    assert [(e.event, e.fields["attempt"], e.fields["wait_s"]) for e in events] == [
        ("job_retrying", 2, 10.0)
    ]
    ready, _ = transitions.retry_ready(retried, NOW + timedelta(seconds=10))
    assert ready.status.retry_at is None and ready.status.queued_at is not None
    assert not [c for c in ready.status.conditions if c.reason == "RetryBackoff"]


def test_the_last_allowed_failure_ends_the_job_with_every_attempt_kept() -> None:
    job = running({"limit": 2, "backoff_s": 1})
    for attempt in (1, 2, 3):
        job = job.evolve()
        job.status.phase, job.status.worker, job.status.attempt = Phase.RUNNING, "w", attempt
        job, events = transitions.complete(job, "w", 1, None, NOW, attempt=attempt)
    assert job.status.phase == Phase.FAILED and job.status.retries == 2
    assert [a.attempt for a in job.status.attempts] == [1, 2, 3]
    assert [e.event for e in events] == ["job_finished"]


def test_a_directory_without_a_latest_file_is_no_checkpoint_to_resume_from() -> None:
    job = running({"limit": 1}, checkpoint_latest="/c/7/")
    retried, _ = transitions.complete(job, "w", 1, None, NOW, attempt=1)
    assert retried.status.resume_from is None


@pytest.mark.parametrize(
    ("exit_code", "exit_signal", "retried"),
    [(1, None, True), (137, None, True), (None, 9, True), (2, None, False), (None, 15, False)],
)
def test_only_the_listed_exit_codes_are_retried(
    exit_code: int | None, exit_signal: int | None, retried: bool
) -> None:
    job = running({"limit": 1, "on_exit_codes": [1, 137]})
    after, _ = transitions.complete(job, "w", exit_code, exit_signal, NOW, attempt=1)
    assert (after.status.phase == Phase.PENDING) is retried


def test_success_preemption_cancel_and_guards_are_never_retried() -> None:
    policy = {"limit": 3}
    ok, _ = transitions.complete(running(policy), "w", 0, None, NOW, attempt=1)
    assert ok.status.phase == Phase.SUCCEEDED
    for desired, reason in ((Phase.PREEMPTED, "preempted"), (Phase.CANCELLED, "user")):
        job = running(policy, desired_phase=desired, reason=reason)
        ended, _ = transitions.complete(job, "w", 143, None, NOW, attempt=1)
        assert ended.status.phase == desired
    timed_out = running(policy, desired_phase=Phase.FAILED, reason="MaxRuntimeExceeded")
    ended, _ = transitions.complete(timed_out, "w", 143, None, NOW, attempt=1)
    assert ended.status.phase == Phase.FAILED and ended.status.retries == 0


def test_a_job_without_a_policy_fails_and_keeps_no_attempts() -> None:
    failed, _ = transitions.complete(running(None), "w", 1, None, NOW, attempt=1)
    assert failed.status.phase == Phase.FAILED and failed.status.attempts == []


def test_a_lost_job_is_retried_only_on_lost() -> None:
    lost = job_in(Phase.LOST, attempt=1)
    for on_lost, phase in ((True, Phase.PENDING), (False, Phase.FAILED)):
        spec = JobSpec(command=["x"], retry=RetryPolicy(limit=1, on_lost=on_lost))
        job = lost.model_copy(update={"spec": spec})
        after, _ = transitions.lost_timeout(job, NOW)
        assert after.status.phase == phase
        vanished, _ = transitions.process_vanished(job, NOW)
        assert vanished.status.phase == phase
    for on_lost, phase in ((True, Phase.PENDING), (False, Phase.FAILED)):
        restarted = running({"limit": 1, "on_lost": on_lost})  # its host restarted: lost
        failure = ("host_restarted", "the host restarted")
        after, _ = transitions.complete(restarted, "w", None, None, NOW, 1, failure)
        assert after.status.phase == phase


@pytest.mark.parametrize("reason", ["start_failed", "OutputDiskFull"])
def test_a_run_that_could_not_start_or_filled_the_disk_is_not_retried(reason: str) -> None:
    job = running({"limit": 3, "on_lost": True})
    failed, _ = transitions.complete(job, "w", None, None, NOW, 1, (reason, "why"))
    assert failed.status.phase == Phase.FAILED and failed.status.reason == reason


def test_attempts_keep_only_the_newest() -> None:
    job = running({"limit": 100, "backoff_s": 0})
    for attempt in range(1, MAX_ATTEMPTS_KEPT + 6):
        job = job.evolve()
        job.status.phase, job.status.worker, job.status.attempt = Phase.RUNNING, "w", attempt
        job, _ = transitions.complete(job, "w", 1, None, NOW, attempt=attempt)
    kept = [a.attempt for a in job.status.attempts]
    assert len(kept) == MAX_ATTEMPTS_KEPT and kept[-1] == MAX_ATTEMPTS_KEPT + 5


@pytest.mark.parametrize(
    ("retry", "field"),
    [
        ({"limit": -1}, "limit"),
        ({"limit": 101}, "limit"),
        ({"limit": 1, "backoff_s": -1}, "backoff_s"),
        ({"limit": 1, "backoff_s": 1e30}, "backoff_s"),
        ({"limit": 1, "backoff_max_s": True}, "backoff_max_s"),
        ({"limit": 1, "on_exit_codes": [256]}, "on_exit_codes"),
        ({"limit": 1, "on_exit_codes": list(range(300))}, "on_exit_codes"),
        ({"limit": 1, "surprise": 1}, "surprise"),
    ],
)
def test_hostile_policies_are_refused_naming_the_field(
    retry: dict[str, object], field: str
) -> None:
    with pytest.raises(ValidationError) as refused:
        JobSpec.model_validate({"command": ["x"], "retry": retry}, context=ADMISSION)
    assert [("retry", field)] == [tuple(e["loc"][:2]) for e in refused.value.errors()]


def test_the_next_run_gets_resume_from_over_the_submitters() -> None:
    settings = WorkerSettings(
        name="w",
        slots=1,
        gpus=[],
        checkpoint_root=Path("/ckpt"),
        default_grace_s=60,
        state_dir=Path("/tmp/state"),
        base_env={"RESUME_FROM": "/the/workers/own"},
    )
    spec = JobSpec(command=["x"], env={"RESUME_FROM": "/old/job/latest.pt"})
    job = Job(metadata=ObjectMeta(id=7, name="j"), spec=spec)
    env = workload_env(_view(job), settings, Path("/ckpt/7"))
    assert env["RESUME_FROM"] == "/old/job/latest.pt"
    job.status.resume_from = "/ckpt/7/latest.pt"  # its last run checkpointed there
    env = workload_env(_view(job), settings, Path("/ckpt/7"))
    assert env["RESUME_FROM"] == "/ckpt/7/latest.pt"
    fresh = Job(metadata=ObjectMeta(id=8, name="k"), spec=JobSpec(command=["x"]))
    assert "RESUME_FROM" not in workload_env(_view(fresh), settings, Path("/ckpt/8"))


def _view(job: Job) -> JobView:
    """The job as the agent reads it from the watch's JSON."""
    return JobView(job.model_dump(mode="json"))
