"""Job value > project default > global default, field by field; None means "not said"."""

from __future__ import annotations

from typing import Any

from jobd.api.models import Job, JobSpec, ObjectMeta, Project, ProjectDefaults, ProjectSpec
from jobd.controllers.verbs.admission import resolve_effective


def _job(**spec: Any) -> Job:
    return Job(metadata=ObjectMeta(name="j", project="p"), spec=JobSpec(command=["true"], **spec))


def _project(priority: int = 0, **defaults: Any) -> Project:
    return Project(
        metadata=ObjectMeta(name="p"),
        spec=ProjectSpec(priority=priority, defaults=ProjectDefaults(**defaults)),
    )


def test_without_a_project_the_global_defaults_apply() -> None:
    eff = resolve_effective(_job(), None)
    assert eff.priority == 0
    assert eff.preemptible is False
    assert eff.checkpoint_grace_s is None, "None: the worker's default grace applies later"


def test_a_job_that_says_nothing_inherits_every_project_default() -> None:
    eff = resolve_effective(_job(), _project(60, preemptible=True, checkpoint_grace_s=300))
    assert (eff.priority, eff.preemptible, eff.checkpoint_grace_s) == (60, True, 300)


def test_the_jobs_own_values_win_over_the_project() -> None:
    project = _project(60, preemptible=True, checkpoint_grace_s=300)
    eff = resolve_effective(_job(priority=5, preemptible=False, checkpoint_grace_s=10), project)
    assert (eff.priority, eff.preemptible, eff.checkpoint_grace_s) == (5, False, 10)


def test_a_jobs_explicit_false_beats_a_project_true() -> None:
    assert (
        resolve_effective(_job(preemptible=False), _project(preemptible=True)).preemptible is False
    )


def test_an_explicit_zero_is_said_and_wins() -> None:
    eff = resolve_effective(
        _job(priority=0, checkpoint_grace_s=0), _project(60, checkpoint_grace_s=300)
    )
    assert eff.priority == 0
    assert eff.checkpoint_grace_s == 0


def test_fields_merge_independently() -> None:
    # The job says only its grace; the project says only preemptible: each keeps its own.
    eff = resolve_effective(_job(checkpoint_grace_s=30), _project(7, preemptible=True))
    assert (eff.priority, eff.preemptible, eff.checkpoint_grace_s) == (7, True, 30)


def test_a_project_that_says_nothing_leaves_the_global_defaults() -> None:
    eff = resolve_effective(_job(), _project(3))
    assert (eff.priority, eff.preemptible, eff.checkpoint_grace_s) == (3, False, None)


def test_grace_stays_unsaid_when_neither_job_nor_project_says_it() -> None:
    eff = resolve_effective(_job(preemptible=True), _project(1, preemptible=False))
    assert eff.preemptible is True
    assert eff.checkpoint_grace_s is None
