"""Retention's clock: the job's TTL, else its project's, else the broker's; else never."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from jobd.api.models import Job, JobSpec, ObjectMeta, Phase, Project, ProjectDefaults, ProjectSpec
from jobd.controllers.retention import expires_in
from jobd.controllers.verbs.admission import resolve_effective
from tests.unit.conftest import NOW, job_in


def _ended(ttl: int | None) -> Job:
    job = job_in(Phase.SUCCEEDED, finished_at=NOW - timedelta(seconds=30))
    job.status.effective.ttl_after_finished_s = ttl
    return job


def test_the_jobs_ttl_wins_over_the_brokers() -> None:
    assert expires_in(_ended(60), NOW, 10.0) == 30
    assert expires_in(_ended(None), NOW, 10.0) == -20
    assert expires_in(_ended(None), NOW, None) is None, "no TTL anywhere: kept for ever"


def test_an_unfinished_job_never_expires() -> None:
    running = job_in(Phase.RUNNING)
    running.status.effective.ttl_after_finished_s = 1
    assert expires_in(running, NOW + timedelta(days=1), 1.0) is None


def _job(**spec: Any) -> Job:
    return Job(metadata=ObjectMeta(name="j", project="p"), spec=JobSpec(command=["x"], **spec))


def test_limits_merge_field_by_field_from_the_project() -> None:
    defaults = ProjectDefaults(max_runtime_s=7200, ttl_after_finished_s=86400, idle_timeout_s=60)
    project = Project(metadata=ObjectMeta(name="p"), spec=ProjectSpec(defaults=defaults))
    eff = resolve_effective(_job(idle_timeout_s=600, max_pending_s=30), project)
    assert (eff.max_runtime_s, eff.idle_timeout_s, eff.max_pending_s) == (7200, 600, 30)
    assert eff.ttl_after_finished_s == 86400
    alone = resolve_effective(_job(), None)
    assert (alone.max_runtime_s, alone.ttl_after_finished_s) == (None, None)
