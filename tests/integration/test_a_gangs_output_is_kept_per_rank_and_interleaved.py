"""A multi-host job's output (issue 25): each member's kept apart, `GET /jobs/{id}/logs`
interleaving whole lines, each behind `[rank N] `, in the order they arrived; `rank=N`
reading one member unprefixed; a member's appends fenced to its own worker; a job of one
node writing and reading exactly one file, as before.

In-process through httpx.ASGITransport. The gang is bound by hand, as its placement would
(`status.members`), since no loop runs here; the members' agents are the test's appends.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from jobd.api.models import Member, Phase
from jobd.broker.app import create_app
from jobd.broker.state import BrokerConfig
from jobd.broker.streams.interleaving import MAX_PENDING
from jobd.controllers.clock import FakeClock
from tests.integration.conftest import bind, job_document

pytestmark = pytest.mark.anyio

TOKEN = "test-token"


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    config = BrokerConfig(data_dir=tmp_path / "data", log_dir=tmp_path / "logs", token=TOKEN)
    app = create_app(config, FakeClock())
    transport = httpx.ASGITransport(app=app)
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with httpx.AsyncClient(transport=transport, base_url="http://jobd", headers=headers) as c:
        yield c
    app.state.broker.close()


def _store(api: httpx.AsyncClient) -> Any:
    return api._transport.app.state.broker.store  # type: ignore[attr-defined]


async def _running_gang(api: httpx.AsyncClient, nodes: int = 2) -> int:
    """A gang Running on w0, w1, ...: its members as placement writes them."""
    made = await api.post("/jobs", json=job_document("gang", nodes=nodes))
    assert made.status_code == 201, made.text
    job_id = int(made.json()["metadata"]["id"])
    store = _store(api)
    bound = store.get_job(job_id).evolve()
    bound.status.phase, bound.status.worker = Phase.RUNNING, "w0"
    bound.status.members = [
        Member(rank=r, worker=f"w{r}", address=f"127.0.0.{r + 2}", phase=Phase.RUNNING)
        for r in range(nodes)
    ]
    store.update_job(bound)
    return job_id


def _end(api: httpx.AsyncClient, job_id: int) -> None:
    broker = api._transport.app.state.broker  # type: ignore[attr-defined]
    ended = broker.store.get_job(job_id).evolve()
    ended.status.phase, ended.status.finished_at = Phase.SUCCEEDED, broker.ctx.clock.now()
    broker.store.update_job(ended)


async def _append(
    api: httpx.AsyncClient, job_id: int, rank: int, offset: int, data: bytes, **kw: Any
) -> httpx.Response:
    params = {"offset": offset, "rank": rank}
    return await api.post(f"/jobs/{job_id}/logs", params=params, content=data, **kw)


async def _read(api: httpx.AsyncClient, job_id: int, **params: Any) -> bytes:
    answer = await api.get(f"/jobs/{job_id}/logs", params=params)
    assert answer.status_code == 200, answer.text
    return answer.content


async def test_members_lines_interleave_in_arrival_order_and_each_reads_alone(
    api: httpx.AsyncClient,
) -> None:
    job_id = await _running_gang(api)
    sent = [
        (0, b"r0 one\nr0 tw"),  # rank 0's second line is not whole yet: it waits
        (1, b"r1 one\n"),
        (0, b"o\n"),  # ... until its end arrives, after rank 1's first line
        (1, b"r1 two\nr1 three\n"),
    ]
    offsets = {0: 0, 1: 0}
    for rank, data in sent:
        answer = await _append(api, job_id, rank, offsets[rank], data)
        assert answer.status_code == 200, answer.text
        offsets[rank] += len(data)
        assert answer.json()["offset"] == offsets[rank]
    assert await _read(api, job_id) == (
        b"[rank 0] r0 one\n[rank 1] r1 one\n[rank 0] r0 two\n[rank 1] r1 two\n[rank 1] r1 three\n"
    )
    assert await _read(api, job_id, rank=0) == b"r0 one\nr0 two\n"
    assert await _read(api, job_id, rank=1) == b"r1 one\nr1 two\nr1 three\n"
    assert await _read(api, job_id, tail=2) == b"[rank 1] r1 two\n[rank 1] r1 three\n"
    assert await _read(api, job_id, rank=1, tail=1) == b"r1 three\n"


async def test_a_chunk_sent_again_is_not_interleaved_twice(api: httpx.AsyncClient) -> None:
    job_id = await _running_gang(api)
    for _ in range(2):  # the answer was lost: the agent sends the same chunk again
        assert (await _append(api, job_id, 1, 0, b"once\n")).status_code == 200
    assert await _read(api, job_id) == b"[rank 1] once\n"
    differs = await _append(api, job_id, 1, 0, b"twice\n")
    assert differs.status_code == 409


async def test_an_unended_line_waits_until_the_job_ends_or_it_grows_too_long(
    api: httpx.AsyncClient,
) -> None:
    job_id = await _running_gang(api)
    await _append(api, job_id, 0, 0, b"epoch 1 50%\r")  # a progress bar: no newline
    assert await _read(api, job_id) == b""
    bar = b"x" * MAX_PENDING
    await _append(api, job_id, 1, 0, bar)
    assert await _read(api, job_id) == b"[rank 1] " + bar + b"\n", "too long to wait"
    _end(api, job_id)  # the job's end lets the last unended line through
    assert await _read(api, job_id) == b"[rank 1] " + bar + b"\n[rank 0] epoch 1 50%\r\n"
    late = await _append(api, job_id, 1, len(bar), b"!")  # a chunk after the end: at once
    assert late.status_code == 200
    assert (await _read(api, job_id)).endswith(b"[rank 0] epoch 1 50%\r\n[rank 1] !\n")


async def test_a_rank_the_job_has_not_is_refused(api: httpx.AsyncClient) -> None:
    job_id = await _running_gang(api)
    written = await _append(api, job_id, 2, 0, b"who?\n")
    assert written.status_code == 409 and "rank 2" in written.json()["detail"]
    read = await api.get(f"/jobs/{job_id}/logs", params={"rank": 2})
    assert read.status_code == 404 and "rank" in read.json()["detail"]
    beyond = await api.get(f"/jobs/{job_id}/logs", params={"rank": 1024})
    assert beyond.status_code == 422 and "rank" in beyond.text
    assert await _read(api, job_id) == b""


async def test_a_worker_writes_only_its_own_members_output(api: httpx.AsyncClient) -> None:
    job_id = await _running_gang(api)
    made = await api.post("/tokens", json={"role": "worker", "worker": "w1"})
    w1 = {"Authorization": f"Bearer {made.json()['token']}"}
    mine = await _append(api, job_id, 1, 0, b"from w1\n", headers=w1)
    assert mine.status_code == 200, mine.text
    theirs = await _append(api, job_id, 0, 0, b"forged\n", headers=w1)
    assert theirs.status_code == 403 and "rank 0" in theirs.json()["detail"]
    assert await _read(api, job_id) == b"[rank 1] from w1\n"


async def test_a_job_of_one_node_writes_and_reads_one_file_as_before(
    api: httpx.AsyncClient, tmp_path: Path
) -> None:
    job_id = int((await api.post("/jobs", json=job_document("one"))).json()["metadata"]["id"])
    bind(api, job_id, "w1")
    await api.post(f"/jobs/{job_id}/started", json={"worker": "w1"})
    answer = await api.post(f"/jobs/{job_id}/logs", params={"offset": 0}, content=b"half a li")
    assert answer.status_code == 200
    assert await _read(api, job_id) == b"half a li", "no line is held back, no prefix"
    assert await _read(api, job_id, rank=0) == b"half a li"
    assert (await api.get(f"/jobs/{job_id}/logs", params={"rank": 1})).status_code == 404
    assert sorted(p.name for p in (tmp_path / "logs" / "jobs").iterdir()) == [
        f"{job_id}.log",
        f"{job_id}.times",
    ]
