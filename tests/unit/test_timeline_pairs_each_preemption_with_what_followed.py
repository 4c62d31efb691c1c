"""The dashboard's preemption timeline: each `auto_preempt` with the `checkpoint_complete`
of the same job and candidate recorded after it, and the job that resumed the victim."""

from __future__ import annotations

from jobd.broker.ui.timeline import preemptions
from jobd.store.base import EventRecord


def _preempt(seq: int, job: int, candidate: int | None, ts: str) -> EventRecord:
    fields = {"candidate_job": candidate, "reason": "sweeper", "priority": 1}
    return EventRecord("auto_preempt", job=job, fields=fields, ts=ts, seq=seq)


def _checkpoint(seq: int, job: int, candidate: int | None, ts: str) -> EventRecord:
    return EventRecord(
        "checkpoint_complete", job=job, fields={"candidate_job": candidate}, ts=ts, seq=seq
    )


def test_each_preemption_gets_its_own_checkpoint_and_resume_newest_first() -> None:
    decided = [
        _preempt(10, 1, 7, "2026-12-04T10:00:00Z"),
        _preempt(20, 2, None, "2026-12-04T10:01:00Z"),
        _preempt(30, 3, 8, "2026-12-04T10:02:00Z"),
    ]
    checkpoints = [
        _checkpoint(5, 1, 7, "2026-12-04T09:59:00Z"),  # before its decision: not its answer
        _checkpoint(12, 1, 7, "2026-12-04T10:00:04.5Z"),
        _checkpoint(22, 2, 9, "2026-12-04T10:01:02Z"),  # another candidate's
    ]
    jobs = {
        1: {"metadata": {"id": 1}, "status": {"phase": "Preempted", "resumed_by": 4}},
        4: {"metadata": {"id": 4}, "status": {"phase": "Running"}},
        2: {"metadata": {"id": 2}, "status": {"phase": "Preempted"}},
    }
    third, second, first = preemptions(decided, checkpoints, jobs)
    assert first.checkpoint is checkpoints[1] and first.checkpoint_after_s == 4.5
    assert first.resumed is jobs[4] and first.victim is jobs[1]
    assert second.checkpoint is None and second.resumed is None
    assert third.victim is None and third.checkpoint_after_s is None  # deleted since
