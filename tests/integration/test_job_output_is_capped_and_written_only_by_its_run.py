"""POST /jobs/{id}/logs takes output only from a job's run, and the broker keeps a capped copy.

In-process through httpx.ASGITransport, with an injected clock for the grace after a job's
end. A flood under a small cap keeps the head and the newest bytes, and a reader (the API,
then `job logs` as a user runs it) is told how many bytes were dropped where.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from jobd.broker.app import create_app
from jobd.broker.state import BrokerConfig
from jobd.controllers.clock import FakeClock
from tests.integration.conftest import bind, job_document

pytestmark = pytest.mark.anyio

TOKEN = "test-token"
CAP = 64 * 1024


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def api(tmp_path: Path, clock: FakeClock) -> AsyncIterator[httpx.AsyncClient]:
    config = BrokerConfig(
        data_dir=tmp_path / "data",
        log_dir=tmp_path / "logs",
        token=TOKEN,
        max_log_bytes=CAP,
        log_grace_s=60,
    )
    app = create_app(config, clock)
    transport = httpx.ASGITransport(app=app)
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with httpx.AsyncClient(transport=transport, base_url="http://jobd", headers=headers) as c:
        yield c
    app.state.broker.close()


async def _running(api: httpx.AsyncClient, name: str) -> int:
    job_id: int = (await api.post("/jobs", json=job_document(name))).json()["metadata"]["id"]
    bind(api, job_id, "w1")
    started = await api.post(f"/jobs/{job_id}/started", json={"worker": "w1"})
    assert started.status_code == 200, started.text
    return job_id


async def _read_all(api: httpx.AsyncClient, job_id: int) -> bytes:
    data, offset = b"", 0
    while True:
        resp = await api.get(f"/jobs/{job_id}/logs", params={"offset": offset})
        data += resp.content
        offset = int(resp.headers["X-Jobd-Offset"])
        if resp.headers["X-Jobd-Done"] == "true" or not resp.content:
            return data


async def _post(api: httpx.AsyncClient, job_id: int, offset: int, data: bytes) -> httpx.Response:
    return await api.post(f"/jobs/{job_id}/logs", params={"offset": offset}, content=data)


async def test_a_flood_keeps_head_and_newest_bytes_and_says_what_was_dropped(
    api: httpx.AsyncClient,
) -> None:
    job_id = await _running(api, "flood")
    lines = b"".join(b"line %07d\n" % i for i in range(200_000))  # 2.6 MB, 40x the cap
    for at in range(0, len(lines), 256 * 1024):
        resp = await _post(api, job_id, at, lines[at : at + 256 * 1024])
        assert resp.status_code == 200 and resp.json()["offset"] == min(len(lines), at + 256 * 1024)
    await api.post(f"/jobs/{job_id}/complete", json={"worker": "w1", "exit_code": 0})
    shown = await _read_all(api, job_id)
    head, tail = lines[: CAP // 2], lines[-(CAP // 2) :]
    note = f"\n[jobd: {len(lines) - CAP:,} bytes dropped here]\n".encode()
    assert shown == head + note + tail


async def test_output_is_refused_before_a_job_runs_and_after_its_grace(
    api: httpx.AsyncClient, clock: FakeClock
) -> None:
    future = await _post(api, 999, 0, b"planted\n")
    assert future.status_code == 404  # a future job's id: nothing is written for it
    pending = (await api.post("/jobs", json=job_document("p"))).json()["metadata"]["id"]
    refused = await _post(api, pending, 0, b"planted\n")
    assert refused.status_code == 409 and "has not started" in refused.json()["detail"]

    job_id = await _running(api, "late")
    assert (await _post(api, job_id, 0, b"real\n")).status_code == 200
    await api.post(f"/jobs/{job_id}/complete", json={"worker": "w1", "exit_code": 0})
    clock.advance(30)
    assert (await _post(api, job_id, 5, b"late chunk\n")).status_code == 200  # in the grace
    clock.advance(31)
    ended = await _post(api, job_id, 16, b"too late\n")
    assert ended.status_code == 409 and "accepted until 60 s" in ended.json()["detail"]
    assert await _read_all(api, job_id) == b"real\nlate chunk\n"


async def test_bytes_at_an_offset_already_written_are_refused_unless_the_same(
    api: httpx.AsyncClient,
) -> None:
    job_id = await _running(api, "retry")
    await _post(api, job_id, 0, b"the real output\n")
    again = await _post(api, job_id, 0, b"the real output\n")  # a retry: answered, not rewritten
    assert again.status_code == 200 and again.json()["offset"] == 16
    impostor = await _post(api, job_id, 0, b"an impostor line\n")
    assert impostor.status_code == 409 and "already written" in impostor.json()["detail"]
    assert await _read_all(api, job_id) == b"the real output\n"
