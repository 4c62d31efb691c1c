"""The scheduler, the refill of a report's commit, `preempt-blockers` and the sweeper with
jobs of several nodes (gangs), on a real SQLite store with an injected clock.

How a bound gang's members come to run and end is the agent's and the reports' to say
(per rank); placement only needs a gang running or ended, so these tests write that
directly (`_run_gang`, `_end`) and exercise what placement decides around it.
"""

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
from jobd.controllers import transitions
from jobd.controllers.clock import FakeClock
from jobd.controllers.context import Context, Settings
from jobd.controllers.scheduler import SchedulerController
from jobd.controllers.sweeper import SweeperController
from jobd.controllers.verbs import drain, reports
from jobd.controllers.verbs.admission import create_jobs
from jobd.controllers.verbs.preempt import preempt_blockers
from jobd.controllers.verbs.refill import refill, room_of
from jobd.controllers.verbs.worker_lease import register_worker
from jobd.store.sql import SQLStore
from tests.integration.conftest import broker_state, job_document, reread

pytestmark = pytest.mark.anyio


@pytest.fixture
def ctx(store: SQLStore) -> Context:
    """On SQLite and on PostgreSQL (tests/conftest.py `store`): off the loop there."""
    return Context(store, Settings(), FakeClock())


def _workers(ctx: Context, *names: str, gpus: int = 0) -> None:
    for name in names:
        spec = WorkerSpec(slots=1, gpus=list(range(gpus)))
        register_worker(ctx, name, spec, f"{name}.lab", "procgroup")


def _submit(ctx: Context, name: str, priority: int = 0, **spec: object) -> Job:
    job = Job(
        metadata=ObjectMeta(name=name, project="p"),
        spec=JobSpec(command=["true"], priority=priority, **spec),
    )
    workers = ctx.store.list_workers()
    return create_jobs(ctx.store, [job], ctx.clock, workers=workers)[0]


async def _schedule(ctx: Context) -> None:
    await SchedulerController(ctx).reconcile("queue")


def _run_gang(ctx: Context, job: Job) -> Job:
    """Every member of a bound gang running (see the module's docstring)."""
    running = reread(ctx, job).evolve()
    now = ctx.clock.now()
    running.status.phase, running.status.started_at = Phase.RUNNING, now
    for member in running.status.members:
        member.phase, member.started_at = Phase.RUNNING, now
    return ctx.store.update_job(running, [])


def _end(ctx: Context, job: Job) -> Job:
    """A bound job, or every member of a gang, ended: Succeeded."""
    return ctx.store.update_job(
        *transitions.finish(reread(ctx, job), Phase.SUCCEEDED, ctx.clock.now())
    )


def _placed(ctx: Context, job: Job) -> list[str]:
    """The workers of a gang's members, rank order ([] while it waits)."""
    return [m.worker for m in reread(ctx, job).status.members]


def _start(ctx: Context, *jobs: Job) -> None:
    """Jobs of one node bound: each reported started by its worker."""
    for job in jobs:
        bound = reread(ctx, job)
        reports.report_started(ctx, bound, bound.status.worker or "")


def _aged_candidate(ctx: Context, name: str, **spec: object) -> Job:
    """A job queued once what runs has run past the sweeper's floor, and queued past its
    threshold in turn (the sweeper's rules 1 and 4; the default settings, 5 minutes)."""
    clock, settings = ctx.clock, ctx.settings
    assert isinstance(clock, FakeClock)
    clock.advance(settings.auto_preempt_min_runtime_s + 1)
    candidate = _submit(ctx, name, **spec)
    clock.advance(settings.auto_preempt_queued_s + 1)
    return candidate


async def test_a_gang_of_three_on_two_workers_holds_nothing_and_says_why(ctx: Context) -> None:
    _workers(ctx, "a", "b")
    gang = _submit(ctx, "gang", priority=9, nodes=3)
    single = _submit(ctx, "single", priority=1)
    await _schedule(ctx)

    waiting = reread(ctx, gang)
    assert waiting.status.phase == Phase.PENDING and waiting.status.members == []
    [condition] = [c for c in waiting.status.conditions if c.type == "Scheduled"]
    assert (condition.reason, condition.message) == (
        "Unschedulable",
        "needs 3 workers that can hold it, 2 can",
    )
    assert reread(ctx, single).status.phase == Phase.SCHEDULED, "the gang holds nothing"
    assert ctx.store.list_events(event="job_scheduled", job=gang.id) == []


async def test_two_gangs_of_two_on_three_workers_bind_whole_in_priority_order(
    ctx: Context,
) -> None:
    _workers(ctx, "a", "b", "c")
    low = _submit(ctx, "low", priority=1, nodes=2)
    high = _submit(ctx, "high", priority=5, nodes=2)
    await _schedule(ctx)

    first = reread(ctx, high)
    assert first.status.phase == Phase.SCHEDULED
    assert len(set(_placed(ctx, high))) == 2, "two members, two different workers"
    assert first.status.worker == first.status.members[0].worker
    assert first.status.attempt == 1
    assert [m.address for m in first.status.members] == [f"{w}.lab" for w in _placed(ctx, high)]
    assert _placed(ctx, low) == [], "never half: one worker left, the other gang waits whole"
    assert reread(ctx, low).status.phase == Phase.PENDING

    _end(ctx, _run_gang(ctx, high))
    await _schedule(ctx)
    assert reread(ctx, low).status.phase == Phase.SCHEDULED
    assert len(set(_placed(ctx, low))) == 2
    [scheduled] = ctx.store.list_events(event="job_scheduled", job=low.id)
    assert scheduled.fields["workers"] == _placed(ctx, low), "one event for the whole gang"


async def test_the_fair_pass_binds_a_gang_whole_under_its_quota(ctx: Context) -> None:
    # Two projects queued and a quota: the pass is fair share's (fairqueue.py). The
    # quota (no borrowing) counts a gang's GPUs once per node: 2 nodes of 2 GPUs are 4.
    _workers(ctx, "a", "b", "c", gpus=2)
    spec = ProjectSpec(quota=ProjectQuota(gpus=4), borrow=False)
    ctx.store.put_project(Project(metadata=ObjectMeta(name="p"), spec=spec))
    gang = _submit(ctx, "gang", priority=5, nodes=2, resources=Resources(gpus=2))
    over = _submit(ctx, "over", priority=5, resources=Resources(gpus=2))
    other = Job(metadata=ObjectMeta(name="other", project="q"), spec=JobSpec(command=["true"]))
    create_jobs(ctx.store, [other], ctx.clock)
    await _schedule(ctx)

    assert len(set(_placed(ctx, gang))) == 2
    assert reread(ctx, over).status.phase == Phase.PENDING, "4 GPUs held: the quota is full"
    [said] = [c for c in reread(ctx, over).status.conditions if c.type == "Scheduled"]
    assert said.reason == "QuotaExceeded"
    assert reread(ctx, other).status.phase == Phase.SCHEDULED


async def test_a_gang_ended_gives_back_every_member_worker(ctx: Context) -> None:
    _workers(ctx, "a", "b", gpus=2)
    gang = _submit(ctx, "gang", priority=5, nodes=2, resources=Resources(gpus=2))
    await _schedule(ctx)
    _run_gang(ctx, gang)
    singles = [_submit(ctx, f"s{i}", resources=Resources(gpus=2)) for i in range(2)]
    await _schedule(ctx)
    assert [reread(ctx, s).status.phase for s in singles] == [Phase.PENDING] * 2

    _end(ctx, gang)
    await _schedule(ctx)
    assert sorted(reread(ctx, s).status.worker or "" for s in singles) == ["a", "b"]


async def test_a_refill_binds_no_job_behind_a_gang_into_its_room(ctx: Context) -> None:
    # a's single job ends in a worker's report; b is free. The gang ahead in the queue
    # needs a and b: the report's refill (one worker's room) must not give a to the
    # job behind it, and the scheduler's pass then binds the gang whole.
    _workers(ctx, "a")
    running = _submit(ctx, "running", priority=1)
    await _schedule(ctx)
    reports.report_started(ctx, reread(ctx, running), "a")
    _workers(ctx, "b")
    gang = _submit(ctx, "gang", priority=5, nodes=2)
    behind = _submit(ctx, "behind", priority=1)
    await _schedule(ctx)
    assert _placed(ctx, gang) == [] and reread(ctx, behind).status.worker == "b"
    _end(ctx, behind)  # b free again; a still busy

    plan = room_of(ctx, "a")
    assert plan is not None
    with ctx.store.batch():
        ended = reports.report_complete(ctx, reread(ctx, running), "a", 0, None)
        refill(ctx, plan, [ended])
    assert _placed(ctx, gang) == []
    assert reread(ctx, behind).status.phase == Phase.SUCCEEDED
    late = _submit(ctx, "late", priority=1)
    await _schedule(ctx)
    assert sorted(_placed(ctx, gang)) == ["a", "b"]
    assert reread(ctx, late).status.phase == Phase.PENDING


async def test_preempt_blockers_frees_several_workers_and_nominates_them_all(
    ctx: Context,
) -> None:
    _workers(ctx, "a", "b", "c")
    victims = [_submit(ctx, f"v{i}", priority=1 + i, preemptible=True) for i in range(3)]
    await _schedule(ctx)
    _start(ctx, *victims)
    gang = _submit(ctx, "gang", priority=9, nodes=2)

    plan = preempt_blockers(ctx, reread(ctx, gang), dry_run=False)
    taken = {victims[0].id, victims[1].id}
    assert {v.id for v in plan.victims} == taken, "the two lowest priorities"
    nominated = reread(ctx, gang).status
    held = sorted(reread(ctx, v).status.worker or "" for v in victims[:2])
    assert sorted(nominated.nominated_workers) == held
    assert nominated.nominated_worker == nominated.nominated_workers[0]
    assert reread(ctx, victims[2]).status.desired_phase == Phase.RUNNING

    # The freed room is the gang's: a job queued meanwhile, higher in the queue's order,
    # does not take it.
    jumper = _submit(ctx, "jumper", priority=20)
    for victim in victims[:2]:
        stopping = reread(ctx, victim)
        reports.report_complete(ctx, stopping, stopping.status.worker or "", None, 15)
    await _schedule(ctx)
    assert sorted(_placed(ctx, gang)) == held
    assert reread(ctx, jumper).status.phase == Phase.PENDING
    assert reread(ctx, gang).status.nominated_workers == []


async def test_the_sweeper_preempts_one_running_gang_as_one_victim(ctx: Context) -> None:
    _workers(ctx, "a", "b", "c")
    victim = _submit(ctx, "victim", priority=1, nodes=2, preemptible=True)
    spare = _submit(ctx, "spare", priority=1, preemptible=True)
    await _schedule(ctx)
    _run_gang(ctx, victim)
    _start(ctx, spare)
    wanted = _aged_candidate(ctx, "wanted", priority=9, nodes=2)

    await SweeperController(ctx).reconcile("sweep")

    [event] = [e.as_json() for e in ctx.store.list_events(event="auto_preempt")]
    assert (event["job"], event["candidate_job"], event["reason"]) == (
        victim.id,
        wanted.id,
        "sweeper",
    ), "the running gang frees two workers: one victim, the single job spared"
    assert sorted(reread(ctx, wanted).status.nominated_workers) == sorted(_placed(ctx, victim))
    assert reread(ctx, spare).status.desired_phase == Phase.RUNNING
    await SweeperController(ctx).reconcile("sweep")
    assert len(ctx.store.list_events(event="auto_preempt")) == 1, "room is on its way"


async def test_the_sweeper_preempts_nothing_when_n_workers_cannot_be_freed(
    ctx: Context,
) -> None:
    _workers(ctx, "a", "b", "c")
    low = _submit(ctx, "low", priority=1, preemptible=True)
    held = [_submit(ctx, f"keep{i}", priority=50, preemptible=True) for i in range(2)]
    await _schedule(ctx)
    _start(ctx, low, *held)
    wanted = _aged_candidate(ctx, "wanted", priority=9, nodes=2)

    await SweeperController(ctx).reconcile("sweep")

    assert ctx.store.list_events(event="auto_preempt") == []
    assert reread(ctx, low).status.desired_phase == Phase.RUNNING
    assert reread(ctx, wanted).status.nominated_workers == []


async def test_a_gang_pinned_to_a_worker_is_refused_with_422(api: httpx.AsyncClient) -> None:
    answer = await api.post("/jobs", json=job_document("pinned", nodes=2, worker="a"))
    assert answer.status_code == 422, answer.text
    assert "spec.worker" in answer.text
    listed = await api.get("/jobs")
    assert listed.json()["items"] == [], "nothing was created"


async def test_preempt_blockers_names_every_worker_of_a_gang(api: httpx.AsyncClient) -> None:
    ctx = broker_state(api).ctx
    _workers(ctx, "a", "b")
    victims = [_submit(ctx, f"v{i}", priority=1, preemptible=True) for i in range(2)]
    await _schedule(ctx)
    _start(ctx, *victims)
    gang = _submit(ctx, "gang", priority=9, nodes=2)
    single = _submit(ctx, "single", priority=9)

    answer = await api.post(f"/jobs/{gang.id}/preempt-blockers", params={"dry_run": "true"})
    assert answer.status_code == 200, answer.text
    found = answer.json()
    assert sorted(found["workers"]) == ["a", "b"] and found["worker"] == found["workers"][0]
    assert len(found["victims"]) == 2
    answer = await api.post(f"/jobs/{single.id}/preempt-blockers", params={"dry_run": "true"})
    assert "workers" not in answer.json(), "a job of one node is answered as before"


async def test_cordoning_any_nominated_worker_releases_a_gangs_hold(ctx: Context) -> None:
    _workers(ctx, "a", "b", "c")
    victims = [_submit(ctx, f"v{i}", priority=1, preemptible=True) for i in range(3)]
    await _schedule(ctx)
    _start(ctx, *victims)
    gang = _submit(ctx, "gang", priority=9, nodes=2)
    preempt_blockers(ctx, reread(ctx, gang), dry_run=False)
    held = reread(ctx, gang).status.nominated_workers
    assert len(held) == 2

    drain.cordon(ctx, held[1])  # not the first, which nominated_worker names

    released = reread(ctx, gang).status
    assert (released.nominated_worker, released.nominated_workers) == (None, [])
