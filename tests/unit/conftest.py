"""Helpers shared by the unit tests: jobs in a given phase, at a fixed time."""

from __future__ import annotations

from datetime import UTC, datetime

from jobd.api.models import TERMINAL_PHASES, Job, JobSpec, ObjectMeta, Phase

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def job_in(phase: Phase, **status: object) -> Job:
    """Job 7, bound to worker `w`, in `phase` (and ended as it says, if terminal)."""
    job = Job(metadata=ObjectMeta(id=7, name="j", resource_version=3), spec=JobSpec(command=["x"]))
    job.status.phase = phase
    job.status.desired_phase = phase if phase in TERMINAL_PHASES else Phase.RUNNING
    job.status.worker = "w"
    job.status.started_at = NOW
    job.status.lost_at = NOW if phase == Phase.LOST else None
    for name, value in status.items():
        setattr(job.status, name, value)
    return job
