"""A slot a worker's report frees is bound in that report's own commit; one freed by
preemption still goes to the job it was freed for.

The broker's app is driven in-process on SQLite and on PostgreSQL (where the reports run
on the store's thread, store/runner.py). Its lifespan is not started, so no scheduler
pass runs unless the test runs one: a job bound right after a report was bound by the
report's own transaction (verbs/refill.py). Each commit is recorded by a listener of
the store, so "the same commit" is asserted as what one commit held.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest

from jobd.api.models import Job, Phase, WorkerSpec
from jobd.broker.state import BrokerConfig, BrokerState
from jobd.controllers.scheduler import SchedulerController
from jobd.controllers.verbs.preempt import preempt_blockers
from jobd.controllers.verbs.worker_lease import register_worker
from jobd.store.base import Change, EventRecord
from tests.integration.conftest import TOKEN, broker_client, broker_state, job_document

pytestmark = pytest.mark.anyio

WORKER = "w1"


@pytest.fixture
async def api(store_url: str, tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    config = BrokerConfig(
        data_dir=tmp_path / "data", log_dir=tmp_path / "logs", db_url=store_url, token=TOKEN
    )
    async with broker_client(config) as client:
        yield client


class Commits:
    """Every commit's job changes, as (job id, phase, worker) triples, one list a commit."""

    def __init__(self) -> None:
        self.seen: list[list[tuple[int, str, str | None]]] = []

    def __call__(self, changes: Sequence[Change], _events: Sequence[EventRecord]) -> None:
        jobs = [c.obj for c in changes if isinstance(c.obj, Job)]
        self.seen.append([(j.id, str(j.status.phase), j.status.worker) for j in jobs])

    def holding(self, job_id: int, phase: Phase) -> list[tuple[int, str, str | None]]:
        """The one commit that moved `job_id` to `phase`."""
        found = [c for c in self.seen if (job_id, str(phase), WORKER) in c]
        assert len(found) == 1, found
        return found[0]


async def _submit(api: httpx.AsyncClient, name: str, **spec: Any) -> int:
    answer = await api.post("/jobs", json=job_document(name, **spec))
    assert answer.status_code == 201, answer.text
    return int(answer.json()["metadata"]["id"])


async def _report(api: httpx.AsyncClient, *reports: dict[str, Any]) -> list[dict[str, Any]]:
    answer = await api.post(f"/workers/{WORKER}/reports", json={"reports": list(reports)})
    assert answer.status_code == 200, answer.text
    results: list[dict[str, Any]] = answer.json()["results"]
    assert all(r["status"] == 200 for r in results), results
    return results


async def _run(api: httpx.AsyncClient, job_id: int) -> None:
    """The worker's batch of a job that ran and exited 0."""
    await _report(
        api, {"job": job_id, "verb": "started"}, {"job": job_id, "verb": "complete", "exit_code": 0}
    )


def _job(state: BrokerState, job_id: int) -> Job:
    job = state.store.get_job(job_id)
    assert job is not None
    return job


async def _schedule(state: BrokerState) -> None:
    await SchedulerController(state.ctx).reconcile("queue")


async def test_the_next_queued_job_is_bound_in_the_commit_that_ends_one(
    api: httpx.AsyncClient,
) -> None:
    state = broker_state(api)
    register_worker(state.ctx, WORKER, WorkerSpec(slots=1), "host", "procgroup")
    # The worker's one slot, taken by the create itself (nothing queued: placing_new.py).
    running = await _submit(api, "running")
    assert _job(state, running).status.worker == WORKER
    first = await _submit(api, "first", priority=1)
    low = await _submit(api, "low", priority=1)
    high = await _submit(api, "high", priority=5)
    await _schedule(state)
    assert _job(state, high).status.phase == Phase.PENDING, "no room: all three queued"
    commits = Commits()
    state.store.subscribe(commits)

    await _run(api, running)
    assert (high, "Scheduled", WORKER) in commits.holding(running, Phase.SUCCEEDED)
    await _run(api, high)

    ended = commits.holding(high, Phase.SUCCEEDED)
    assert (first, "Scheduled", WORKER) in ended, "FIFO within a priority: first before low"
    assert _job(state, low).status.phase == Phase.PENDING, "one slot freed, one job bound"
    # The worker's next batch frees the slot again: low is bound in that commit.
    await _run(api, first)
    assert (low, "Scheduled", WORKER) in commits.holding(first, Phase.SUCCEEDED)


async def test_a_report_that_ends_nothing_binds_nothing(api: httpx.AsyncClient) -> None:
    state = broker_state(api)
    register_worker(state.ctx, WORKER, WorkerSpec(slots=1), "host", "procgroup")
    running = await _submit(api, "running")
    await _schedule(state)
    queued = await _submit(api, "queued")
    await _report(api, {"job": running, "verb": "started"})
    assert _job(state, queued).status.phase == Phase.PENDING
    assert _job(state, running).status.phase == Phase.RUNNING


async def test_a_slot_freed_by_preemption_is_kept_for_its_nominated_job(
    api: httpx.AsyncClient,
) -> None:
    state = broker_state(api)
    register_worker(state.ctx, WORKER, WorkerSpec(slots=1), "host", "procgroup")
    victim = await _submit(api, "victim", priority=1, preemptible=True)
    await _schedule(state)
    await _report(api, {"job": victim, "verb": "started"})
    wanted = await _submit(api, "wanted", priority=5)
    preempt_blockers(state.ctx, _job(state, wanted), dry_run=False)
    assert _job(state, wanted).status.nominated_worker == WORKER
    # Queued after the nomination and ahead of the nominated job in the queue's order:
    # it must not take the slot freed for `wanted`.
    jumper = await _submit(api, "jumper", priority=9)
    commits = Commits()
    state.store.subscribe(commits)

    await _report(
        api,
        {"job": victim, "verb": "stopping"},
        {"job": victim, "verb": "complete", "signal": 15},
    )

    freed = commits.holding(victim, Phase.PREEMPTED)
    assert {i for i, _, _ in freed} == {victim}, "the report's commit bound nothing"
    assert _job(state, jumper).status.phase == Phase.PENDING
    await _schedule(state)
    assert _job(state, wanted).status.worker == WORKER
    assert _job(state, jumper).status.phase == Phase.PENDING


async def test_a_cordoned_worker_is_not_refilled(api: httpx.AsyncClient) -> None:
    state = broker_state(api)
    register_worker(state.ctx, WORKER, WorkerSpec(slots=1), "host", "procgroup")
    running = await _submit(api, "running")
    await _schedule(state)
    queued = await _submit(api, "queued")
    assert (await api.post(f"/workers/{WORKER}/cordon")).status_code == 200
    await _run(api, running)
    assert _job(state, queued).status.phase == Phase.PENDING


async def test_a_refill_reads_no_more_queued_jobs_than_the_room_it_fills(
    api: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each job read from the queue is parsed: a refill of one freed slot reads one."""
    state = broker_state(api)
    register_worker(state.ctx, WORKER, WorkerSpec(slots=2), "host", "procgroup")
    first, second = await _submit(api, "first"), await _submit(api, "second")
    queued = [await _submit(api, f"queued-{i}") for i in range(4)]
    await _schedule(state)
    read: list[tuple[int, int]] = []  # (asked for, given) of each read of the queue's head
    queue_head = state.store.queue_head

    def reading(limit: int, *args: Any, **kw: Any) -> list[Job]:
        page = queue_head(limit, *args, **kw)
        read.append((limit, len(page)))
        return page

    monkeypatch.setattr(state.store, "queue_head", reading)
    await _run(api, first)
    assert read == [(1, 1)]
    assert _job(state, queued[0]).status.worker == WORKER
    read.clear()
    await _run(api, second)
    await _run(api, queued[0])
    assert read == [(1, 1), (1, 1)], "one read of one job per freed slot"
    assert [_job(state, j).status.phase for j in queued[1:]] == [
        Phase.SCHEDULED,
        Phase.SCHEDULED,
        Phase.PENDING,
    ]
