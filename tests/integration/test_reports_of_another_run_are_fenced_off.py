"""Fencing through the broker's HTTP API: a report must be of the job's current run.

Every bind gives the job a new `status.attempt`; every report carries the attempt its
worker was given. A report of another attempt, or from a worker the job is not bound
to, gets 409 and changes nothing: not the job (same resource_version), not the events.
Retried and racing reports of the right run still end a job exactly once. Driven
in-process through httpx.ASGITransport on a real SQLite store; no controllers run (the
lifespan is not started), so binds are made here with the scheduler's own `bind`.
"""

from __future__ import annotations

import random
from typing import Any

import anyio
import httpx
import pytest

from jobd.api.models import Job
from jobd.controllers import transitions
from tests.integration.conftest import broker_state, job_document

pytestmark = pytest.mark.anyio


def _job(api: httpx.AsyncClient, job_id: int) -> Job:
    job = broker_state(api).store.get_job(job_id)
    assert job is not None
    return job


def _bind(api: httpx.AsyncClient, job_id: int, worker: str) -> int:
    """Bind as the scheduler does (a new attempt); returns the attempt."""
    state = broker_state(api)
    bound = state.store.update_job(*transitions.bind(_job(api, job_id), worker, [], _now(api)))
    return bound.status.attempt


def _unbind(api: httpx.AsyncClient, job_id: int) -> None:
    """The worker's lease ran out before the job started: back to the queue."""
    broker_state(api).store.update_job(*transitions.unbind(_job(api, job_id)))


def _now(api: httpx.AsyncClient) -> Any:
    return broker_state(api).ctx.clock.now()


async def _submit(api: httpx.AsyncClient, name: str) -> int:
    return int((await api.post("/jobs", json=job_document(name))).json()["metadata"]["id"])


def _events(api: httpx.AsyncClient, job_id: int) -> list[str]:
    return [e.event for e in broker_state(api).store.list_events(job=job_id)]


async def _report(
    api: httpx.AsyncClient, job_id: int, verb: str, worker: str, **body: Any
) -> httpx.Response:
    return await api.post(f"/jobs/{job_id}/{verb}", json={"worker": worker, **body})


async def test_a_report_of_an_old_attempt_gets_409_and_changes_nothing(
    api: httpx.AsyncClient,
) -> None:
    job_id = await _submit(api, "fenced")
    first = _bind(api, job_id, "w1")
    _unbind(api, job_id)
    second = _bind(api, job_id, "w1")  # the same worker, a new run
    assert (first, second) == (1, 2)
    before, events = _job(api, job_id), _events(api, job_id)

    for verb, body in [
        ("started", {}),
        ("stopping", {}),
        ("checkpoint-complete", {}),
        ("complete", {"exit_code": 0}),
    ]:
        resp = await _report(api, job_id, verb, "w1", attempt=first, **body)
        assert resp.status_code == 409, (verb, resp.text)
        assert "attempt 2" in resp.json()["detail"] and "attempt 1" in resp.json()["detail"]

    after = _job(api, job_id)
    assert after.metadata.resource_version == before.metadata.resource_version
    assert after.status.phase == "Scheduled" and _events(api, job_id) == events

    ok = await _report(api, job_id, "started", "w1", attempt=second)
    assert ok.status_code == 200 and ok.json()["status"]["phase"] == "Running"
    done = await _report(api, job_id, "complete", "w1", attempt=second, exit_code=0)
    assert done.json()["status"]["phase"] == "Succeeded"


async def test_a_report_from_a_worker_the_job_is_not_bound_to_gets_409(
    api: httpx.AsyncClient,
) -> None:
    job_id = await _submit(api, "elsewhere")
    attempt = _bind(api, job_id, "w1")
    await _report(api, job_id, "started", "w1", attempt=attempt)
    before = _job(api, job_id)

    resp = await _report(api, job_id, "complete", "w2", attempt=attempt, exit_code=1)

    assert resp.status_code == 409 and "not 'w2'" in resp.json()["detail"]
    assert _job(api, job_id).metadata.resource_version == before.metadata.resource_version
    assert "job_finished" not in _events(api, job_id)


async def test_a_future_attempt_is_refused_too(api: httpx.AsyncClient) -> None:
    job_id = await _submit(api, "future")
    _bind(api, job_id, "w1")
    resp = await _report(api, job_id, "started", "w1", attempt=7)
    assert resp.status_code == 409 and _job(api, job_id).status.phase == "Scheduled"


async def test_a_report_without_an_attempt_is_judged_by_its_worker_alone(
    api: httpx.AsyncClient,
) -> None:
    """An agent older than fencing sends no attempt; during a rolling upgrade its jobs
    must still end, so the broker takes the report if the job is bound to it."""
    job_id = await _submit(api, "legacy")
    _bind(api, job_id, "w1")
    assert (await _report(api, job_id, "started", "w2")).status_code == 409
    assert (await _report(api, job_id, "started", "w1")).status_code == 200
    done = await _report(api, job_id, "complete", "w1", exit_code=0)
    assert done.json()["status"]["phase"] == "Succeeded"


async def test_a_negative_attempt_is_a_validation_error(api: httpx.AsyncClient) -> None:
    job_id = await _submit(api, "negative")
    _bind(api, job_id, "w1")
    resp = await _report(api, job_id, "started", "w1", attempt=-1)
    assert resp.status_code == 422 and "attempt" in resp.json()["detail"]
    batch = {"reports": [{"job": job_id, "verb": "started", "attempt": -1}]}
    assert (await api.post("/workers/w1/reports", json=batch)).status_code == 422


async def test_a_batch_answers_a_stale_report_409_and_takes_the_current_one(
    api: httpx.AsyncClient,
) -> None:
    job_id = await _submit(api, "batched")
    old = _bind(api, job_id, "w1")
    _unbind(api, job_id)
    new = _bind(api, job_id, "w1")
    batch = {
        "reports": [
            {"job": job_id, "verb": "started", "attempt": old},
            {"job": job_id, "verb": "complete", "attempt": old, "exit_code": 1},
            {"job": job_id, "verb": "started", "attempt": new},
            {"job": job_id, "verb": "complete", "attempt": new, "exit_code": 0},
        ]
    }
    body = (await api.post("/workers/w1/reports", json=batch)).json()
    assert [r["status"] for r in body["results"]] == [409, 409, 200, 200]
    assert _job(api, job_id).status.phase == "Succeeded"
    assert _events(api, job_id).count("job_finished") == 1


async def test_ten_duplicate_completes_end_the_job_once(api: httpx.AsyncClient) -> None:
    job_id = await _submit(api, "dup")
    attempt = _bind(api, job_id, "w1")
    await _report(api, job_id, "started", "w1", attempt=attempt)

    answers = [
        await _report(api, job_id, "complete", "w1", attempt=attempt, exit_code=0)
        for _ in range(10)
    ]

    assert {a.status_code for a in answers} == {200}
    assert {a.json()["status"]["phase"] for a in answers} == {"Succeeded"}
    assert _events(api, job_id).count("job_finished") == 1


async def test_a_hundred_racing_cancels_preempts_and_completes_end_each_job_once(
    api: httpx.AsyncClient,
) -> None:
    jobs = [await _submit(api, f"race{i}") for i in range(5)]
    attempts = {job_id: _bind(api, job_id, "w1") for job_id in jobs}
    for job_id in jobs:
        await _report(api, job_id, "started", "w1", attempt=attempts[job_id])
    rng = random.Random(11)
    requests: list[tuple[int, str]] = [
        (rng.choice(jobs), rng.choice(["cancel", "preempt", "complete", "complete-stale"]))
        for _ in range(100)
    ]
    statuses: list[int] = []

    async def send(job_id: int, verb: str) -> None:
        attempt = attempts[job_id]
        if verb in ("cancel", "preempt"):
            resp = await api.post(f"/jobs/{job_id}/{verb}")
        else:
            stale = verb == "complete-stale"
            body = {"attempt": attempt - 1 if stale else attempt, "exit_code": 0}
            resp = await _report(api, job_id, "complete", "w1", **body)
        statuses.append(resp.status_code)

    async with anyio.create_task_group() as tg:
        for job_id, verb in requests:
            tg.start_soon(send, job_id, verb)

    assert len(statuses) == 100 and set(statuses) <= {200, 409}
    for job_id in jobs:
        job = _job(api, job_id)
        assert job.status.phase.terminal, job.status.phase
        events = _events(api, job_id)
        assert events.count("job_finished") == 1, events
        assert events.count("job_cancelled") <= 1


async def test_a_heartbeat_naming_an_old_run_has_it_stopped(api: httpx.AsyncClient) -> None:
    job_id = await _submit(api, "rerun")  # before any worker: left queued, for _bind
    registration = {"spec": {"slots": 2}, "hostname": "h", "runner": "procgroup"}
    assert (await api.put("/workers/w1", json=registration)).status_code == 200
    old = _bind(api, job_id, "w1")
    _unbind(api, job_id)
    new = _bind(api, job_id, "w1")

    stale = {"running": [job_id], "attempts": {str(job_id): old}}
    answer = (await api.post("/workers/w1/heartbeat", json=stale)).json()
    current = {"running": [job_id], "attempts": {str(job_id): new}}
    again = (await api.post("/workers/w1/heartbeat", json=current)).json()

    assert answer["stop"] == [job_id] and again["stop"] == []
    [event] = broker_state(api).store.list_events(job=job_id, event="worker_stale_attempt")
    assert event.fields == {"attempt": old, "current_attempt": new}
    assert _job(api, job_id).status.phase == "Scheduled"
