"""Fair share and quotas on a real SQLite store with the controllers: within a priority
the least-used project goes first; a job past its quota waits QuotaExceeded, or borrows
idle capacity; a project within its quota reclaims it; each run is charged once and the
usage outlives the broker."""

from __future__ import annotations

import httpx
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
    WorkerSpec,
)
from jobd.controllers.accounting import CHARGE_KEY, AccountingController
from jobd.controllers.clock import FakeClock
from jobd.controllers.context import Context, Settings
from jobd.controllers.fairshare import Billing
from jobd.controllers.reclaim import ReclaimController
from jobd.controllers.scheduler import SchedulerController
from jobd.controllers.verbs import reports
from jobd.controllers.verbs.admission import create_jobs
from jobd.controllers.verbs.worker_lease import register_worker
from jobd.store.base import Change, RunCharge
from jobd.wire.models import UsageReport
from tests.integration.conftest import broker_state, reread

pytestmark = pytest.mark.anyio

HOUR = 3600.0


def _project(ctx: Context, name: str, **spec: object) -> None:
    ctx.store.put_project(Project(metadata=ObjectMeta(name=name), spec=ProjectSpec(**spec)))


def _submit(
    ctx: Context,
    project: str,
    name: str,
    gpus: int = 0,
    owner: str | None = None,
    **spec: object,
) -> Job:
    job = Job(
        metadata=ObjectMeta(name=name, project=project, owner=owner),
        spec=JobSpec(command=["true"], resources=Resources(gpus=gpus), **spec),
    )
    return create_jobs(ctx.store, [job], ctx.clock)[0]


async def _schedule(ctx: Context) -> None:
    await SchedulerController(ctx).reconcile("queue")


def _start(ctx: Context, job: Job) -> Job:
    job = reread(ctx, job)
    return reports.report_started(ctx, job, job.status.worker or "")


def _finish(ctx: Context, job: Job) -> None:
    job = reread(ctx, job)
    reports.report_complete(ctx, job, job.status.worker or "", 0, None)


def _scheduled_order(ctx: Context) -> list[int]:
    return [e.job for e in ctx.store.list_events(event="job_scheduled") if e.job is not None]


def _condition(job: Job) -> tuple[str, str, str] | None:
    for c in job.status.conditions:
        if c.type == "Scheduled":
            return c.status, c.reason, c.message
    return None


async def test_the_least_used_project_goes_first_within_a_priority(ctx: Context) -> None:
    _project(ctx, "heavy")
    _project(ctx, "light")
    # Heavy used 10 GPU-hours an hour ago; light nothing.
    at = ctx.clock.now().timestamp() - HOUR
    half = ctx.settings.billing.half_life_s
    ctx.store.charge_usage([RunCharge(1_000_000, 1, "heavy", "", 10 * HOUR, at)], half)
    ctx.usage.charge("heavy", "", 10 * HOUR, at, half)
    register_worker(ctx, "w", WorkerSpec(slots=1), "host", "procgroup")
    heavy = [_submit(ctx, "heavy", f"h{i}") for i in range(3)]
    light = [_submit(ctx, "light", f"l{i}") for i in range(2)]
    urgent = _submit(ctx, "heavy", "urgent", priority=5)
    order = []
    for _ in range(6):
        await _schedule(ctx)
        (bound,) = ctx.store.list_jobs(phases=[Phase.SCHEDULED])
        order.append(bound.id)
        _start(ctx, bound)
        _finish(ctx, bound)
    # Priority first (the seed's), then the factor, then first come.
    assert order[:3] == [urgent.id, light[0].id, light[1].id]
    assert order[3:] == [j.id for j in heavy]


async def test_a_project_past_its_quota_waits_quota_exceeded(ctx: Context) -> None:
    _project(ctx, "a", quota=ProjectQuota(gpus=1), borrow=False)
    register_worker(ctx, "w", WorkerSpec(slots=1, gpus=[0, 1]), "host", "procgroup")
    first, second = _submit(ctx, "a", "one", gpus=1), _submit(ctx, "a", "two", gpus=1)
    await _schedule(ctx)
    assert reread(ctx, first).status.phase == Phase.SCHEDULED
    waiting = reread(ctx, second)
    assert waiting.status.phase == Phase.PENDING
    status, reason, message = _condition(waiting) or (None, "", "")
    assert (status, reason) == ("False", "QuotaExceeded")
    assert "2 GPUs, past its quota of 1" in message
    # Once the first ends, the second is within the quota and runs.
    _start(ctx, first)
    _finish(ctx, first)
    await _schedule(ctx)
    assert _condition(reread(ctx, second)) == ("True", "Bound", "bound to w")


async def test_a_user_past_max_running_per_user_waits_even_when_the_project_borrows(
    ctx: Context,
) -> None:
    _project(ctx, "a", max_running_per_user=1)
    register_worker(ctx, "w", WorkerSpec(slots=4), "host", "procgroup")
    alice = [_submit(ctx, "a", f"alice{i}", owner="alice") for i in range(2)]
    bob = _submit(ctx, "a", "bob0", owner="bob")
    await _schedule(ctx)
    assert set(_scheduled_order(ctx)) == {alice[0].id, bob.id}
    status, reason, message = _condition(reread(ctx, alice[1])) or (None, "", "")
    assert (status, reason) == ("False", "QuotaExceeded")
    assert "user alice runs 1 jobs of project a" in message


async def test_a_borrower_takes_idle_gpus_and_gives_them_back_to_a_project_within_quota(
    ctx: Context,
) -> None:
    _project(ctx, "a", quota=ProjectQuota(gpus=1))  # borrows, by default
    _project(ctx, "b", quota=ProjectQuota(gpus=1))
    register_worker(ctx, "w", WorkerSpec(slots=1, gpus=[0, 1]), "host", "procgroup")
    own = _submit(ctx, "a", "own", gpus=1, preemptible=True)
    borrowed = _submit(ctx, "a", "borrowed", gpus=1, preemptible=True)
    await _schedule(ctx)
    assert set(_scheduled_order(ctx)) == {own.id, borrowed.id}, "idle GPUs are lent"
    _start(ctx, own)
    ctx.clock.advance(10)
    _start(ctx, borrowed)
    ctx.clock.advance(10)
    waiting = _submit(ctx, "b", "b0", gpus=1)
    await _schedule(ctx)
    assert reread(ctx, waiting).status.phase == Phase.PENDING
    await ReclaimController(ctx).reconcile("reclaim")
    # The newest borrowed job goes, through path B, for b's job; a keeps its quota's worth.
    victim = reread(ctx, borrowed)
    assert victim.status.desired_phase == Phase.PREEMPTED
    assert victim.status.preemption is not None
    assert (victim.status.preemption.reason, victim.status.preemption.candidate_job) == (
        "reclaim",
        waiting.id,
    )
    assert reread(ctx, own).status.desired_phase == Phase.RUNNING
    assert reread(ctx, waiting).status.nominated_worker == "w"
    (event,) = ctx.store.list_events(event="auto_preempt")
    assert event.job == borrowed.id
    assert event.fields["reason"] == "reclaim"


async def test_a_gang_is_reclaimed_for_anew_when_a_nominated_worker_is_not_heard(
    ctx: Context,
) -> None:
    _project(ctx, "a", quota=ProjectQuota(gpus=1))
    _project(ctx, "b", quota=ProjectQuota(gpus=2))
    workers = [f"w{i}" for i in range(4)]
    for name in workers:
        register_worker(ctx, name, WorkerSpec(slots=1, gpus=[0]), name, "procgroup")
    lent = [_submit(ctx, "a", f"a{i}", gpus=1, preemptible=True) for i in range(4)]
    await _schedule(ctx)
    for job in lent:  # one after the other: the newest are reclaimed first
        _start(ctx, job)
        ctx.clock.advance(10)
    gang = _submit(ctx, "b", "gang", gpus=1, nodes=2)
    await ReclaimController(ctx).reconcile("reclaim")
    first = reread(ctx, gang).status.nominated_workers
    assert len(first) == 2 and len(ctx.store.list_events(event="auto_preempt")) == 2
    # A restarted broker hears from every worker but rank 1's nominated one: the room
    # held there may never come, so reclaim acts for the gang again, not on rank 0's word.
    restarted = Context(ctx.store, Settings(), ctx.clock)
    for name in workers:
        if name != first[1]:
            restarted.leases.heard_from(name, ctx.clock.now())
    await ReclaimController(restarted).reconcile("reclaim")
    again = reread(restarted, gang).status.nominated_workers
    assert again[0] == first[0] and again[1] not in first, again
    assert len(ctx.store.list_events(event="auto_preempt")) == 3


async def test_a_non_preemptible_borrowed_job_is_left_to_finish(ctx: Context) -> None:
    _project(ctx, "a", quota=ProjectQuota(gpus=1))
    _project(ctx, "b", quota=ProjectQuota(gpus=1))
    register_worker(ctx, "w", WorkerSpec(slots=1, gpus=[0, 1]), "host", "procgroup")
    jobs = [_submit(ctx, "a", f"a{i}", gpus=1, preemptible=False) for i in range(2)]
    await _schedule(ctx)
    for job in jobs:
        _start(ctx, job)
    _submit(ctx, "b", "b0", gpus=1)
    await ReclaimController(ctx).reconcile("reclaim")
    assert all(reread(ctx, j).status.desired_phase == Phase.RUNNING for j in jobs)
    assert ctx.store.list_events(event="auto_preempt") == []


async def test_each_run_is_charged_once_and_the_usage_outlives_the_broker(ctx: Context) -> None:
    _project(ctx, "a")
    register_worker(ctx, "w", WorkerSpec(slots=1, gpus=[0]), "host", "procgroup")
    accounting = AccountingController(ctx)
    ctx.store.subscribe(lambda changes, _e: [accounting.keys_for(c) for c in changes])
    job = _submit(ctx, "a", "train", gpus=1, owner="alice")
    await _schedule(ctx)
    _start(ctx, job)
    ctx.clock.advance(100)
    _finish(ctx, job)
    # 1 GPU and one CPU's weight for 100 s, with a 7-day half-life: barely decayed.
    expected = 100 * (1 + Billing().cpu)
    # Counted in memory at once, for the scheduler's next pass...
    assert ctx.usage.projects["a"].value == pytest.approx(expected, rel=1e-3)
    assert ctx.store.list_usage() == []
    # ...and in the store at the next write.
    await accounting.reconcile(CHARGE_KEY)
    (project_row, user_row) = ctx.store.list_usage()
    assert (project_row.project, project_row.user) == ("a", "")
    assert (user_row.project, user_row.user) == ("a", "alice")
    assert project_row.value == pytest.approx(expected, rel=1e-3)
    assert user_row.value == pytest.approx(project_row.value)
    # A run heard twice is charged once.
    again = RunCharge(job.id, 1, "a", "alice", 5.0, ctx.clock.now().timestamp())
    assert ctx.store.charge_usage([again], 3600.0) == []
    assert ctx.store.list_usage()[0].value == project_row.value
    # A broker started again reads the usage it had.
    restarted = Context(ctx.store, Settings(), FakeClock(ctx.clock.now()))
    assert restarted.usage.projects["a"].value == pytest.approx(expected, rel=1e-3)
    assert restarted.usage.users[("a", "alice")].value == pytest.approx(expected, rel=1e-3)


async def test_runs_written_together_decay_to_the_latest_end(ctx: Context) -> None:
    half = 10.0
    runs = [RunCharge(1, 1, "a", "", 8.0, 100.0), RunCharge(2, 1, "a", "", 1.0, 110.0)]
    assert ctx.store.charge_usage(runs, half) == runs
    (row,) = ctx.store.list_usage()
    assert (row.value, row.at) == (pytest.approx(5.0), 110.0)


async def test_a_raised_quota_lets_the_waiting_job_run(ctx: Context) -> None:
    _project(ctx, "a", quota=ProjectQuota(gpus=1), borrow=False)
    register_worker(ctx, "w", WorkerSpec(slots=1, gpus=[0, 1]), "host", "procgroup")
    _submit(ctx, "a", "one", gpus=1)
    waiting = _submit(ctx, "a", "two", gpus=1)
    await _schedule(ctx)
    assert reread(ctx, waiting).status.phase == Phase.PENDING
    heard: list[Change] = []
    ctx.store.subscribe(lambda changes, _e: heard.extend(changes))
    _project_update(ctx, "a", quota=ProjectQuota(gpus=2), borrow=False)
    # The project's change is a reason to look at the queue again; the look binds it.
    assert [k for c in heard for k in SchedulerController(ctx).keys_for(c)] == ["queue"]
    await _schedule(ctx)
    assert reread(ctx, waiting).status.phase == Phase.SCHEDULED


def _project_update(ctx: Context, name: str, **spec: object) -> None:
    held = ctx.store.get_project(name)
    assert held is not None
    ctx.store.put_project(held.model_copy(update={"spec": ProjectSpec(**spec)}))


async def test_get_usage_answers_the_standings_of_the_stored_usage(
    api: httpx.AsyncClient,
) -> None:
    state = broker_state(api)
    half = state.ctx.settings.billing.half_life_s
    now = state.ctx.clock.now().timestamp()
    state.ctx.usage.charge("vision", "alice", 7200.0, now, half)
    answer = await api.get("/usage")
    assert answer.status_code == 200
    report = UsageReport.model_validate(answer.json())
    (vision,) = report.projects
    assert (vision.project, vision.factor) == ("vision", pytest.approx(0.5))
    assert vision.usage == pytest.approx(7200.0, rel=1e-3)
    assert [(u.project, u.user) for u in report.users] == [("vision", "alice")]
    assert report.weights.gpu == 1.0 and report.half_life_s == half


async def test_a_user_token_sees_the_usage_of_its_projects_only(api: httpx.AsyncClient) -> None:
    state = broker_state(api)
    half = state.ctx.settings.billing.half_life_s
    now = state.ctx.clock.now().timestamp()
    for project, user in (("a", "alice"), ("b", "bob")):
        state.ctx.usage.charge(project, user, 100.0, now, half)
    made = await api.post("/tokens", json={"role": "user", "projects": ["a"], "name": "alice"})
    alice = {"Authorization": f"Bearer {made.json()['token']}"}
    seen = UsageReport.model_validate((await api.get("/usage", headers=alice)).json())
    assert [p.project for p in seen.projects] == ["a"]
    assert [(u.project, u.user) for u in seen.users] == [("a", "alice")]
    every = UsageReport.model_validate((await api.get("/usage")).json())
    assert [p.project for p in every.projects] == ["a", "b"]
