"""The seed's sweeper: all four conditions, each one held back on its own.

A running job is auto-preempted for a queued one only when the queued job has waited for
capacity more than `auto_preempt_queued_s`, the running job is preemptible, its priority
is strictly lower, and it has run more than `auto_preempt_min_runtime_s`. The clock is a
FakeClock, so five minutes pass in no time.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from jobd.api.models import (
    Job,
    JobSpec,
    ObjectMeta,
    Phase,
    Project,
    ProjectDefaults,
    ProjectSpec,
    WorkerSpec,
)
from jobd.controllers import lifecycle
from jobd.controllers.clock import FakeClock
from jobd.controllers.context import Context, Settings
from jobd.controllers.queueing import Result
from jobd.controllers.scheduler import SchedulerController
from jobd.controllers.sweeper import SweeperController
from jobd.controllers.verbs import reports
from jobd.controllers.verbs.admission import apply_project, create_jobs
from jobd.controllers.verbs.worker_lease import register_worker
from jobd.store.sql import open_store
from tests.integration.conftest import reread

pytestmark = pytest.mark.anyio

FIVE_MIN = 300.0


@pytest.fixture
def ctx(tmp_path: Path) -> Iterator[Context]:
    store = open_store(f"sqlite:///{tmp_path}/jobd.db")
    settings = Settings(auto_preempt_queued_s=FIVE_MIN, auto_preempt_min_runtime_s=FIVE_MIN)
    yield Context(store, settings, FakeClock())
    store.close()


def _clock(ctx: Context) -> FakeClock:
    assert isinstance(ctx.clock, FakeClock)
    return ctx.clock


def _submit(ctx: Context, name: str, priority: int, **spec: object) -> Job:
    job = Job(
        metadata=ObjectMeta(name=name, project="p"),
        spec=JobSpec(command=["true"], priority=priority, **spec),
    )
    return create_jobs(ctx.store, [job], ctx.clock)[0]


async def _run(ctx: Context, job: Job) -> Job:
    """Schedule and start `job` now (it must be the one the scheduler picks)."""
    await SchedulerController(ctx).reconcile("queue")
    bound = reread(ctx, job)
    assert bound.status.phase == Phase.SCHEDULED
    return reports.report_started(ctx, bound, bound.status.worker or "")


async def _sweep(ctx: Context) -> Result:
    return await SweeperController(ctx).reconcile("sweep")


def _preempts(ctx: Context) -> list[dict[str, object]]:
    return [e.as_json() for e in ctx.store.list_events(event="auto_preempt")]


async def _scenario(
    ctx: Context,
    *,
    queued_s: float = 301,
    ran_s: float = 301,
    victim_priority: int = 1,
    candidate_priority: int = 10,
    preemptible: bool | None = True,
) -> tuple[Job, Job]:
    """One slot: a running victim and a queued candidate, aged as asked."""
    register_worker(ctx, "w", WorkerSpec(slots=1), "host", "procgroup")
    victim = _submit(ctx, "victim", victim_priority, preemptible=preemptible)
    await SchedulerController(ctx).reconcile("queue")
    # Whichever age is larger starts first; the other begins part-way through it.
    if ran_s >= queued_s:
        victim = reports.report_started(ctx, reread(ctx, victim), "w")
        _clock(ctx).advance(ran_s - queued_s)
        candidate = _submit(ctx, "candidate", candidate_priority)
        _clock(ctx).advance(queued_s)
    else:
        candidate = _submit(ctx, "candidate", candidate_priority)
        _clock(ctx).advance(queued_s - ran_s)
        victim = reports.report_started(ctx, reread(ctx, victim), "w")
        _clock(ctx).advance(ran_s)
    return victim, candidate


async def test_all_four_conditions_preempt_the_victim_for_the_candidate(ctx: Context) -> None:
    victim, candidate = await _scenario(ctx)
    await _sweep(ctx)

    victim = reread(ctx, victim)
    assert victim.status.desired_phase == Phase.PREEMPTED
    assert victim.status.phase == Phase.RUNNING, "the worker reports the stop, not the sweeper"
    assert victim.status.signal == "preempt"
    assert victim.status.preemption is not None
    assert victim.status.preemption.reason == "sweeper"
    assert victim.status.preemption.candidate_job == candidate.id
    [event] = _preempts(ctx)
    assert event["job"] == victim.id
    assert event["candidate_job"] == candidate.id
    assert event["reason"] == "sweeper"
    assert (event["priority"], event["candidate_priority"]) == (1, 10)
    assert reread(ctx, candidate).status.nominated_worker == "w"


async def test_the_preempted_slot_goes_to_the_candidate(ctx: Context) -> None:
    victim, candidate = await _scenario(ctx)
    intruder = _submit(ctx, "intruder", 10)  # same priority, but never waited 5 minutes
    await _sweep(ctx)
    victim = reports.report_stopping(ctx, reread(ctx, victim), "w")
    assert victim.status.phase == Phase.PREEMPTING
    victim = reports.report_complete(ctx, victim, "w", None, 15)
    assert victim.status.phase == Phase.PREEMPTED
    await SchedulerController(ctx).reconcile("queue")
    assert reread(ctx, candidate).status.phase == Phase.SCHEDULED
    assert reread(ctx, intruder).status.phase == Phase.PENDING


async def test_queued_only_299_seconds_preempts_nobody(ctx: Context) -> None:
    victim, _ = await _scenario(ctx, queued_s=299)
    result = await _sweep(ctx)
    assert _preempts(ctx) == []
    assert reread(ctx, victim).status.desired_phase == Phase.RUNNING
    assert result.requeue_after == pytest.approx(1)


async def test_exactly_five_minutes_queued_is_not_more_than_five(ctx: Context) -> None:
    await _scenario(ctx, queued_s=FIVE_MIN)
    await _sweep(ctx)
    assert _preempts(ctx) == []


async def test_a_victim_that_is_not_preemptible_is_left_alone(ctx: Context) -> None:
    victim, _ = await _scenario(ctx, preemptible=False)
    result = await _sweep(ctx)
    assert _preempts(ctx) == []
    assert reread(ctx, victim).status.signal is None
    assert result.requeue_after is None, "no time passing can change this"


async def test_a_job_that_says_nothing_is_not_preemptible(ctx: Context) -> None:
    await _scenario(ctx, preemptible=None)
    await _sweep(ctx)
    assert _preempts(ctx) == []


async def test_a_project_default_makes_its_jobs_preemptible(ctx: Context) -> None:
    project = Project(
        metadata=ObjectMeta(name="p"),
        spec=ProjectSpec(defaults=ProjectDefaults(preemptible=True)),
    )
    apply_project(ctx.store, project, dry_run=False)
    victim, _ = await _scenario(ctx, preemptible=None)
    await _sweep(ctx)
    assert [e["job"] for e in _preempts(ctx)] == [victim.id]


async def test_equal_priority_is_not_strictly_lower(ctx: Context) -> None:
    victim, _ = await _scenario(ctx, victim_priority=10, candidate_priority=10)
    result = await _sweep(ctx)
    assert _preempts(ctx) == []
    assert reread(ctx, victim).status.desired_phase == Phase.RUNNING
    assert result.requeue_after is None


async def test_a_higher_priority_victim_is_left_alone(ctx: Context) -> None:
    await _scenario(ctx, victim_priority=20, candidate_priority=10)
    await _sweep(ctx)
    assert _preempts(ctx) == []


async def test_a_victim_running_only_299_seconds_is_left_alone(ctx: Context) -> None:
    victim, _ = await _scenario(ctx, ran_s=299)
    result = await _sweep(ctx)
    assert _preempts(ctx) == []
    assert reread(ctx, victim).status.desired_phase == Phase.RUNNING
    assert result.requeue_after == pytest.approx(1), "the victim comes of age in one second"

    _clock(ctx).advance(result.requeue_after or 0)
    _clock(ctx).advance(0.001)
    await _sweep(ctx)
    assert [e["job"] for e in _preempts(ctx)] == [victim.id]


async def test_requeue_after_is_the_time_until_the_queued_rule_can_hold(ctx: Context) -> None:
    victim, _ = await _scenario(ctx, queued_s=100, ran_s=1000)
    result = await _sweep(ctx)
    assert result.requeue_after == pytest.approx(200)
    assert _preempts(ctx) == []

    _clock(ctx).advance(200.5)
    await _sweep(ctx)
    assert [e["job"] for e in _preempts(ctx)] == [victim.id]


async def test_requeue_after_is_the_sooner_of_the_two_timers(ctx: Context) -> None:
    # Queued 250 s (50 s to go), victim ran 10 s (290 s to go): nothing can happen for 290 s,
    # but the sweeper wakes at the first threshold and then waits for the second.
    await _scenario(ctx, queued_s=250, ran_s=10)
    first = await _sweep(ctx)
    assert first.requeue_after == pytest.approx(50)
    _clock(ctx).advance(51)
    second = await _sweep(ctx)
    assert second.requeue_after == pytest.approx(239)
    assert _preempts(ctx) == []


async def test_a_job_waiting_on_a_dependency_preempts_nobody(ctx: Context) -> None:
    register_worker(ctx, "w", WorkerSpec(slots=1), "host", "procgroup")
    victim = _submit(ctx, "victim", 1, preemptible=True)
    await _run(ctx, victim)
    parent = _submit(ctx, "parent", 0)  # queued behind the victim, never runs
    child = _submit(ctx, "child", 10, depends_on=["parent"])
    _clock(ctx).advance(10 * FIVE_MIN)
    result = await _sweep(ctx)
    assert _preempts(ctx) == []
    assert reread(ctx, child).status.dependencies_met is False
    assert reread(ctx, parent).status.phase == Phase.PENDING
    assert result.requeue_after is None


async def test_the_queued_clock_starts_when_dependencies_are_met(ctx: Context) -> None:
    register_worker(ctx, "w", WorkerSpec(slots=2), "host", "procgroup")
    parent = _submit(ctx, "parent", 0)
    await _run(ctx, parent)
    victim = _submit(ctx, "victim", 1, preemptible=True)
    await _run(ctx, victim)
    child = _submit(ctx, "child", 10, depends_on=["parent"])
    filler = _submit(ctx, "filler", 0)
    _clock(ctx).advance(2 * FIVE_MIN)

    reports.report_complete(ctx, reread(ctx, parent), "w", 0, None)
    await _run(ctx, filler)  # takes the parent's slot before the child is ready
    await lifecycle.LifecycleController(ctx).reconcile(str(child.id))
    assert reread(ctx, child).status.dependencies_met is True

    _clock(ctx).advance(FIVE_MIN - 1)
    result = await _sweep(ctx)
    assert _preempts(ctx) == []
    assert result.requeue_after == pytest.approx(1)
    _clock(ctx).advance(2)
    await _sweep(ctx)
    assert [(e["job"], e["candidate_job"]) for e in _preempts(ctx)] == [(victim.id, child.id)]


async def test_a_victim_already_preempting_is_counted_so_no_second_victim_falls(
    ctx: Context,
) -> None:
    register_worker(ctx, "w", WorkerSpec(slots=2), "host", "procgroup")
    older = _submit(ctx, "older", 1, preemptible=True)
    await _run(ctx, older)
    _clock(ctx).advance(10)
    newer = _submit(ctx, "newer", 1, preemptible=True)
    await _run(ctx, newer)
    candidate = _submit(ctx, "candidate", 10)
    _clock(ctx).advance(FIVE_MIN + 1)

    await _sweep(ctx)
    assert [e["job"] for e in _preempts(ctx)] == [newer.id], "the most recent start goes"

    await _sweep(ctx)
    reports.report_stopping(ctx, reread(ctx, newer), "w")
    _clock(ctx).advance(60)
    await _sweep(ctx)
    assert [e["job"] for e in _preempts(ctx)] == [newer.id]
    assert reread(ctx, older).status.desired_phase == Phase.RUNNING

    # Even without its nomination, the candidate is owed the slot already on its way back.
    unnominated = reread(ctx, candidate).model_copy(deep=True)
    unnominated.status.nominated_worker = None
    ctx.store.update_job(unnominated)
    await _sweep(ctx)
    assert [e["job"] for e in _preempts(ctx)] == [newer.id]


async def test_two_candidates_each_get_their_own_victim(ctx: Context) -> None:
    register_worker(ctx, "w", WorkerSpec(slots=2), "host", "procgroup")
    victims = [_submit(ctx, f"v{i}", 1, preemptible=True) for i in range(2)]
    for victim in victims:
        await _run(ctx, victim)
    first = _submit(ctx, "first", 10)
    second = _submit(ctx, "second", 10)
    _clock(ctx).advance(FIVE_MIN + 1)
    await _sweep(ctx)
    pairs = {(e["job"], e["candidate_job"]) for e in _preempts(ctx)}
    assert {job for job, _ in pairs} == {v.id for v in victims}
    assert {cand for _, cand in pairs} == {first.id, second.id}


async def test_free_room_is_scheduled_not_preempted_for(ctx: Context) -> None:
    register_worker(ctx, "w", WorkerSpec(slots=1), "host", "procgroup")
    victim = _submit(ctx, "victim", 1, preemptible=True)
    await _run(ctx, victim)
    candidate = _submit(ctx, "candidate", 10)
    _clock(ctx).advance(FIVE_MIN + 1)
    register_worker(ctx, "spare", WorkerSpec(slots=1), "host", "procgroup")
    wanted: list[tuple[str, str]] = []
    ctx.enqueue = lambda controller, key: wanted.append((controller, key))
    await _sweep(ctx)
    assert _preempts(ctx) == []
    assert ("scheduler", "queue") in wanted
    assert reread(ctx, candidate).status.nominated_worker is None
