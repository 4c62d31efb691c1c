"""A multi-host job through the broker's HTTP API: each member's worker reports its rank.

Driven in-process through httpx.ASGITransport on a real SQLite store; no loop runs, so
the gang is bound here the way the scheduler binds one (`tests/gang_binding.py`, one write),
and every report is sent by the test as the members' agents would send it. What is held:
a report from a worker that is not that member's gets 409 and changes nothing; the job is
Running once every member is; a failing member stops the others and the job ends Failed
naming its rank; all exit 0: Succeeded; cancel; retry queues the whole gang again; the
checkpoint is complete once every member saw the sentinel; progress is rank 0's; each
member's worker lists and watches the job, and reads its secrets, as rank 0's does.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from jobd.api.models import Job, Phase
from tests.gang_binding import bind_gang
from tests.integration.conftest import broker_state, job_document

pytestmark = pytest.mark.anyio

WORKERS = ["a", "b", "c"]


def _job(api: httpx.AsyncClient, job_id: int) -> Job:
    job = broker_state(api).store.get_job(job_id)
    assert job is not None
    return job


async def _bound_gang(api: httpx.AsyncClient, nodes: int = 2, **spec: Any) -> Job:
    """A gang submitted and bound to the first `nodes` workers, rank 0 on `a`."""
    doc = job_document(f"gang{nodes}", nodes=nodes, **spec)
    created = await api.post("/jobs", json=doc)
    assert created.status_code == 201, created.text
    state = broker_state(api)
    job = _job(api, created.json()["metadata"]["id"])
    placements = [(w, f"127.0.0.{i + 2}", []) for i, w in enumerate(WORKERS[:nodes])]
    return state.store.update_job(*bind_gang(job, placements, state.ctx.clock.now()))


async def _report(
    api: httpx.AsyncClient, job: Job, verb: str, rank: int, worker: str | None = None, **body: Any
) -> httpx.Response:
    worker = worker or WORKERS[rank]
    fields = {"worker": worker, "attempt": job.status.attempt, "rank": rank, **body}
    return await api.post(f"/jobs/{job.id}/{verb}", json=fields)


async def _ok(api: httpx.AsyncClient, job: Job, verb: str, rank: int, **body: Any) -> None:
    answer = await _report(api, job, verb, rank, **body)
    assert answer.status_code == 200, answer.text


async def _running(api: httpx.AsyncClient, nodes: int = 2, **spec: Any) -> Job:
    job = await _bound_gang(api, nodes, **spec)
    for rank in range(nodes):
        port = {"master_port": 29511} if rank == 0 else {}
        await _ok(api, job, "started", rank, checkpoint_dir=f"/ck/{rank}/", **port)
    return _job(api, job.id)


async def test_a_report_from_a_worker_not_that_members_gets_409_and_changes_nothing(
    api: httpx.AsyncClient,
) -> None:
    job = await _bound_gang(api)
    for rank, worker in [(1, "a"), (0, "b"), (1, "c"), (2, "c")]:
        answer = await _report(api, job, "started", rank, worker)
        assert answer.status_code == 409, (rank, worker, answer.text)
    assert _job(api, job.id).metadata.resource_version == job.metadata.resource_version


async def test_the_gang_runs_once_every_member_runs_with_rank_0s_port(
    api: httpx.AsyncClient,
) -> None:
    job = await _bound_gang(api)
    await _ok(api, job, "started", 0, master_port=29511, checkpoint_dir="/ck/0/")
    half = _job(api, job.id)
    assert half.status.phase == Phase.SCHEDULED and half.status.master_port == 29511
    assert half.status.checkpoint_dir == "/ck/0/"
    await _ok(api, job, "started", 1)
    running = _job(api, job.id)
    assert running.status.phase == Phase.RUNNING
    assert [m.phase for m in running.status.members] == [Phase.RUNNING, Phase.RUNNING]


async def test_a_failing_member_stops_the_rest_and_the_job_fails_naming_its_rank(
    api: httpx.AsyncClient,
) -> None:
    job = await _running(api)
    await _ok(api, job, "complete", 1, signal=9)
    stopping = _job(api, job.id)
    assert stopping.status.phase == Phase.RUNNING and stopping.status.signal == "cancel"
    await _ok(api, job, "stopping", 0)
    await _ok(api, job, "complete", 0, exit_code=143)
    ended = _job(api, job.id)
    assert ended.status.phase == Phase.FAILED and ended.status.failed_rank == 1
    assert (ended.status.exit_code, ended.status.exit_signal) == (None, 9)
    assert ended.status.reason == "rank 1 failed: signal 9"
    finished = broker_state(api).store.list_events(event="job_finished", job=job.id)
    assert [e.fields["phase"] for e in finished] == ["Failed"]


async def test_all_members_exiting_0_succeed(api: httpx.AsyncClient) -> None:
    job = await _running(api, 3)
    for rank in (2, 0):
        await _ok(api, job, "complete", rank, exit_code=0)
        assert _job(api, job.id).status.phase == Phase.RUNNING
    await _ok(api, job, "complete", 1, exit_code=0)
    assert _job(api, job.id).status.phase == Phase.SUCCEEDED


async def test_a_cancelled_gang_ends_when_every_member_ended(api: httpx.AsyncClient) -> None:
    job = await _running(api)
    assert (await api.post(f"/jobs/{job.id}/cancel")).status_code == 200
    await _ok(api, job, "stopping", 0)
    await _ok(api, job, "complete", 0, signal=15)
    assert _job(api, job.id).status.phase == Phase.CANCELLING
    await _ok(api, job, "complete", 1, signal=15)
    assert _job(api, job.id).status.phase == Phase.CANCELLED


async def test_a_retry_queues_the_whole_gang_again(api: httpx.AsyncClient) -> None:
    job = await _running(api, retry={"limit": 1, "backoff_s": 1})
    await _ok(api, job, "complete", 0, exit_code=2)
    await _ok(api, job, "complete", 1, signal=15)
    again = _job(api, job.id)
    assert again.status.phase == Phase.PENDING and again.status.retries == 1
    assert again.status.members == [] and again.status.worker is None
    listed = await api.get("/jobs", params={"worker": "b"})
    assert [j["metadata"]["id"] for j in listed.json()["items"]] == []


async def test_the_checkpoint_is_complete_when_every_member_saw_the_sentinel(
    api: httpx.AsyncClient,
) -> None:
    job = await _running(api)
    assert (await api.post(f"/jobs/{job.id}/preempt")).status_code == 200
    await _ok(api, job, "checkpoint-complete", 1)
    half = _job(api, job.id).status.preemption
    assert half is not None and not half.checkpoint_complete
    await _ok(api, job, "checkpoint-complete", 0)
    done = _job(api, job.id).status.preemption
    assert done is not None and done.checkpoint_complete
    events = broker_state(api).store.list_events(event="checkpoint_complete", job=job.id)
    assert len(events) == 1


async def test_progress_is_taken_from_rank_0_only(api: httpx.AsyncClient) -> None:
    job = await _running(api)
    await _ok(api, job, "progress", 1, step=9, total=10)
    assert _job(api, job.id).status.progress is None
    await _ok(api, job, "progress", 0, step=3, total=10)
    progress = _job(api, job.id).status.progress
    assert progress is not None and progress.step == 3


async def test_each_members_worker_lists_and_watches_the_gang(api: httpx.AsyncClient) -> None:
    job = await _bound_gang(api, env={"TOKEN": "s3cret"})
    for worker in ("a", "b"):
        listed = (await api.get("/jobs", params={"worker": worker})).json()["items"]
        assert [j["metadata"]["id"] for j in listed] == [job.id], worker
        assert listed[0]["spec"]["env"]["TOKEN"] == "s3cret"  # its worker reads its secrets
    assert (await api.get("/jobs", params={"worker": "c"})).json()["items"] == []
    revision = broker_state(api).feed.revision
    await _ok(api, job, "started", 0, master_port=29511)
    watched = await api.get("/watch", params={"worker": "b", "since": revision, "timeout": 1})
    changes = watched.json()["changes"]
    assert [c["object"]["status"]["master_port"] for c in changes] == [29511]
