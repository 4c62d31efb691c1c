"""The `Scheduled=False` reasons (api/wait_reasons.py) move with the job's own moves:
parents met, backoff over, unbound from a lost worker, placeable again each say what the
job waits for now, in the same write; a reason already said is not written again; an
Unschedulable verdict is placement's to lift, never another move's."""

from __future__ import annotations

from datetime import timedelta

from jobd.api.models import Job, Phase
from jobd.api.wait_reasons import WaitReason
from jobd.controllers import transitions
from tests.unit.conftest import NOW, job_in


def _reason(job: Job) -> str | None:
    found = [c for c in job.status.conditions if c.type == "Scheduled" and c.status == "False"]
    return found[0].reason if found else None


def _queued(reason: WaitReason, **status: object) -> Job:
    job = job_in(Phase.PENDING, worker=None, **status)
    transitions.waits(job.status, reason, "said", NOW)
    return job


def test_a_job_whose_parents_ended_waits_for_room() -> None:
    job = _queued(WaitReason.WAITING_FOR_DEPENDENCIES, dependencies_met=False)
    met, _ = transitions.dependencies_met(job, NOW)
    assert _reason(met) == "WaitingForCapacity"
    unplaceable = _queued(WaitReason.UNSCHEDULABLE, dependencies_met=False)
    assert _reason(transitions.dependencies_met(unplaceable, NOW)[0]) == "Unschedulable"


def test_a_retry_whose_backoff_is_over_waits_for_room() -> None:
    job = _queued(WaitReason.RETRY_BACKOFF, retry_at=NOW + timedelta(seconds=5))
    assert _reason(transitions.retry_ready(job, NOW)[0]) == "WaitingForCapacity"


def test_a_job_unbound_from_a_lost_worker_says_so() -> None:
    unbound, _ = transitions.unbind(job_in(Phase.SCHEDULED), NOW)
    scheduled = next(c for c in unbound.status.conditions if c.type == "Scheduled")
    assert (scheduled.status, scheduled.reason) == ("False", "WaitingForCapacity")
    assert "worker w was lost before it started the job" in scheduled.message


def test_placeable_again_says_the_weightiest_reason_left() -> None:
    parents = _queued(WaitReason.UNSCHEDULABLE, dependencies_met=False)
    assert _reason(transitions.placeable(parents, NOW)[0]) == "WaitingForDependencies"
    backoff = _queued(WaitReason.UNSCHEDULABLE, retry_at=NOW)
    assert _reason(transitions.placeable(backoff, NOW)[0]) == "RetryBackoff"


def test_a_reason_already_said_is_not_written_again() -> None:
    job = _queued(WaitReason.WAITING_FOR_CAPACITY)
    capped, _ = transitions.wait_reason(job, WaitReason.ARRAY_PARALLELISM, "cap", NOW)
    assert capped is not job and _reason(capped) == "ArrayParallelism"
    again, _ = transitions.wait_reason(capped, WaitReason.ARRAY_PARALLELISM, "cap", NOW)
    assert again is capped, "the same reason: nothing to write"
    verdict = _queued(WaitReason.UNSCHEDULABLE)
    kept, _ = transitions.wait_reason(verdict, WaitReason.ARRAY_PARALLELISM, "cap", NOW)
    assert kept is verdict
