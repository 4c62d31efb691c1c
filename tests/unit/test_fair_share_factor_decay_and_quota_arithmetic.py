"""The arithmetic of fair share (billing, decay, the factor) and of quotas, as pure functions."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest

from jobd.api.models import (
    Job,
    JobSpec,
    ObjectMeta,
    Phase,
    Project,
    ProjectQuota,
    ProjectSpec,
    Resources,
)
from jobd.controllers.fairshare import (
    Billing,
    Usage,
    UsageRow,
    accrued,
    decayed,
    factors,
    run_charge,
    standings,
)
from jobd.controllers.quotas import Held, held_by, over_quota, quota_verdict
from jobd.controllers.reclaim import borrowers, takes_only_borrowed

NOW = datetime(2026, 6, 1, tzinfo=UTC)
DAY = 86400.0


def _job(
    project: str = "a",
    gpus: int = 0,
    cpus: float | None = None,
    memory: int | None = None,
    owner: str | None = "alice",
    job_id: int = 1,
    started_s_ago: float | None = None,
) -> Job:
    resources = Resources(gpus=gpus, cpus=cpus, memory=memory)
    job = Job(
        metadata=ObjectMeta(name=f"j{job_id}", project=project, owner=owner, id=job_id),
        spec=JobSpec(command=["true"], resources=resources),
    )
    if started_s_ago is not None:
        job.status.phase = Phase.RUNNING
        job.status.started_at = NOW - timedelta(seconds=started_s_ago)
        job.status.gpus = list(range(gpus))
    return job


def _project(name: str, **spec: object) -> Project:
    return Project(metadata=ObjectMeta(name=name), spec=ProjectSpec(**spec))


# -- billing -------------------------------------------------------------------------------


def test_a_gpu_second_bills_one_and_cpus_and_memory_bill_their_weights() -> None:
    billing = Billing(cpu=0.0625, memory_gib=0.0078125)
    assert billing.rate(Resources(gpus=2, cpus=16)) == pytest.approx(3.0)
    assert billing.rate(Resources(cpus=4, memory=128 << 30)) == pytest.approx(0.25 + 1.0)
    # A job naming no CPUs holds one: it is billed one.
    assert billing.rate(Resources()) == pytest.approx(0.0625)


def test_weights_are_the_operators_to_set() -> None:
    assert Billing(cpu=1.0, memory_gib=0.0).rate(Resources(cpus=8, memory=1 << 40)) == 8.0


# -- decay ---------------------------------------------------------------------------------


def test_usage_halves_every_half_life() -> None:
    assert decayed(100.0, 7 * DAY, 7 * DAY) == pytest.approx(50.0)
    assert decayed(100.0, 14 * DAY, 7 * DAY) == pytest.approx(25.0)
    assert decayed(100.0, 0.0, 7 * DAY) == 100.0


def test_a_short_run_is_charged_its_billed_seconds() -> None:
    # 1 GPU for 60 s, ended now, on a 7-day half-life: 60 GPU-seconds, barely decayed.
    assert run_charge(1.0, 60.0, 0.0, 7 * DAY) == pytest.approx(60.0, rel=1e-4)


def test_a_run_decays_as_the_integral_of_its_seconds() -> None:
    half = 100.0
    # A run as long as a half-life is worth H/ln2 * (1 - 1/2) at its end...
    assert run_charge(2.0, half, 0.0, half) == pytest.approx(2 * half / math.log(2) / 2)
    # ...and half that one half-life later.
    assert run_charge(2.0, half, half, half) == pytest.approx(half / math.log(2) / 2)


def test_a_running_jobs_usage_so_far_is_what_its_charge_will_be() -> None:
    billing = Billing(half_life_s=3600.0)
    running = _job(gpus=1, started_s_ago=1800.0)
    rate = billing.rate(running.spec.resources, 1)
    assert accrued(running, billing, NOW) == pytest.approx(run_charge(rate, 1800.0, 0.0, 3600.0))
    assert accrued(_job(gpus=1), billing, NOW) == 0.0  # not started


def test_a_stored_row_decays_and_adds() -> None:
    row = UsageRow(value=80.0, at=0.0)
    row.add(10.0, now_s=100.0, half_life_s=100.0)
    assert (row.value, row.at) == (pytest.approx(50.0), 100.0)


def test_effective_usage_counts_the_stored_and_the_running() -> None:
    billing = Billing(half_life_s=DAY)
    usage = Usage()
    usage.charge("a", "alice", 100.0, NOW.timestamp() - DAY, DAY)
    running = _job(project="b", gpus=1, owner="bob", started_s_ago=60.0)
    projects, users = usage.effective([running], billing, NOW)
    assert projects["a"] == pytest.approx(50.0)
    assert users[("a", "alice")] == pytest.approx(50.0)
    assert projects["b"] == pytest.approx(60.0 * billing.rate(running.spec.resources, 1), rel=1e-3)
    assert ("b", "bob") in users


# -- the factor ----------------------------------------------------------------------------


def test_the_factor_is_one_unused_a_half_on_target_and_less_beyond() -> None:
    f = factors({"a": 0.0, "b": 100.0}, {"a": 1, "b": 1}, ["a", "b"])
    assert f["a"] == 1.0
    assert f["b"] == pytest.approx(0.25)  # all the usage on half the shares: 2^-2
    even = factors({"a": 50.0, "b": 50.0}, {}, ["a", "b"])
    assert even == {"a": pytest.approx(0.5), "b": pytest.approx(0.5)}


def test_more_shares_mean_a_higher_factor_for_the_same_usage() -> None:
    f = factors({"a": 50.0, "b": 50.0}, {"a": 3, "b": 1}, ["a", "b"])
    assert f["a"] > 0.5 > f["b"]
    assert f["a"] == pytest.approx(2 ** (-0.5 / 0.75))


def test_nobody_having_used_anything_every_factor_is_one() -> None:
    assert factors({}, {"a": 5}, ["a", "b"]) == {"a": 1.0, "b": 1.0}


def test_standings_list_projects_and_users_with_their_shares() -> None:
    usage = Usage()
    usage.charge("a", "alice", 30.0, NOW.timestamp(), DAY)
    usage.charge("a", "bob", 10.0, NOW.timestamp(), DAY)
    projects = {"a": _project("a", shares=1), "b": _project("b", shares=3)}
    found = standings(usage, [], projects, Billing(half_life_s=DAY), NOW)
    a, b = found["projects"]
    assert (a["project"], a["usage"], a["share"], a["usage_share"]) == ("a", 40.0, 0.25, 1.0)
    assert (b["project"], b["factor"]) == ("b", 1.0)
    assert [(u["user"], u["usage_share"]) for u in found["users"]] == [
        ("alice", 0.75),
        ("bob", 0.25),
    ]


# -- quotas --------------------------------------------------------------------------------


def test_held_counts_each_projects_running_resources_and_each_users_jobs() -> None:
    bound = [
        _job(gpus=1, cpus=2, job_id=1),
        _job(gpus=2, memory=1 << 30, job_id=2, owner="bob"),
        _job(project="b", job_id=3),
    ]
    held, users = held_by(bound)
    assert held["a"] == Held(gpus=3, millicpus=2000, memory=1 << 30, jobs=2)
    assert users == {("a", "alice"): 1, ("a", "bob"): 1, ("b", "alice"): 1}


@pytest.mark.parametrize(
    ("quota", "job", "past"),
    [
        (ProjectQuota(gpus=2), _job(gpus=1), "3 GPUs, past its quota of 2"),
        (ProjectQuota(gpus=3), _job(gpus=1), None),
        (ProjectQuota(cpus=4), _job(cpus=2.5), "4.5 CPUs, past its quota of 4"),
        (
            ProjectQuota(memory=1 << 30),
            _job(memory=1 << 30),
            "2GiB of memory, past its quota of 1GiB",
        ),
        (ProjectQuota(running_jobs=2), _job(), "3 running jobs, past its quota of 2"),
        (ProjectQuota(), _job(gpus=64), None),
    ],
)
def test_a_quota_is_past_when_the_job_would_take_the_project_beyond_it(
    quota: ProjectQuota, job: Job, past: str | None
) -> None:
    held = Held(gpus=2, millicpus=2000, memory=1 << 30, jobs=2)
    said = over_quota(quota, held, job)
    if past is None:
        assert said is None
    else:
        assert said is not None and past in said


def test_the_verdict_says_whether_idle_capacity_may_be_borrowed() -> None:
    held = Held(gpus=1, jobs=1)
    job = _job(gpus=1)
    lends = quota_verdict(job, _project("a", quota=ProjectQuota(gpus=1)), held, 0)
    assert lends is not None and lends.borrowable
    assert "may borrow" in lends.message
    keeps = quota_verdict(job, _project("a", quota=ProjectQuota(gpus=1), borrow=False), held, 0)
    assert keeps is not None and not keeps.borrowable
    assert quota_verdict(job, _project("a", quota=ProjectQuota(gpus=2)), held, 0) is None
    assert quota_verdict(job, None, held, 5) is None  # no project document: no limits


def test_max_running_per_user_is_never_borrowed_beyond() -> None:
    project = _project("a", max_running_per_user=2)
    assert quota_verdict(_job(), project, None, 1) is None
    verdict = quota_verdict(_job(), project, None, 2)
    assert verdict is not None and not verdict.borrowable
    assert "user alice runs 2 jobs" in verdict.message


def test_reclaim_takes_back_what_was_borrowed_and_never_more() -> None:
    projects = {"a": _project("a", quota=ProjectQuota(gpus=1))}
    own, lent = _job(gpus=1, job_id=1), _job(gpus=1, job_id=2)
    held, _ = held_by([own, lent])
    assert borrowers(held, projects) == {"a"}
    assert takes_only_borrowed([lent], held, projects)
    assert not takes_only_borrowed([own, lent], held, projects)
    within, _ = held_by([own])
    assert borrowers(within, projects) == set()
