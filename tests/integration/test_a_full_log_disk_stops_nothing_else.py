"""A full log directory (a real tmpfs, filled): output is refused with 507, nothing else stops.

The broker runs in-process (httpx.ASGITransport) with its log dir on a 1 MiB tmpfs and its
store elsewhere. While the disk is full a job's `complete` is accepted, jobs are created,
and events.jsonl falls behind; once space returns, the storage watch (the pass its loop
makes each second, called here) completes the file from the events table, in order, and
the refused chunk of output is taken when sent again.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from jobd.broker.state import BrokerConfig, BrokerState
from tests.integration.conftest import TOKEN, bind, broker_client, broker_state, job_document
from tests.tmpfs import fill, mounted_tmpfs

pytestmark = pytest.mark.anyio


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    with mounted_tmpfs(tmp_path / "logs", "1m") as logs:
        config = BrokerConfig(data_dir=tmp_path / "data", log_dir=logs, token=TOKEN)
        async with broker_client(config) as client:
            yield client


def _file_seqs(state: BrokerState) -> list[int]:
    return [json.loads(line)["seq"] for line in state.events.path.read_text().splitlines()]


async def test_a_full_log_disk_refuses_output_only(api: httpx.AsyncClient) -> None:
    state = broker_state(api)
    job_id = (await api.post("/jobs", json=job_document("j"))).json()["metadata"]["id"]
    bind(api, job_id, "w1")
    assert (await api.post(f"/jobs/{job_id}/started", json={"worker": "w1"})).status_code == 200
    logs = f"/jobs/{job_id}/logs"
    assert (await api.post(logs, params={"offset": 0}, content=b"before\n")).status_code == 200

    filler = fill(state.config.log_dir)
    chunk = b"x" * 8192
    refused = await api.post(logs, params={"offset": 7}, content=chunk)
    assert refused.status_code == 507
    assert refused.json()["detail"] == (
        f"the job log at {state.logs.path(job_id)} could not be written: No space left on device"
    )
    done = await api.post(f"/jobs/{job_id}/complete", json={"worker": "w1", "exit_code": 0})
    assert done.status_code == 200 and done.json()["status"]["phase"] == "Succeeded"
    for i in range(40):  # their job_created lines outgrow the last page of the file
        assert (await api.post("/jobs", json=job_document(f"more-{i}"))).status_code == 201
    table = [ev.seq for ev in state.store.list_events(limit=10_000)]
    assert _file_seqs(state) != table
    assert (await api.get("/readyz")).status_code == 200  # the store is fine

    filler.unlink()
    for _ in range(state.storage.resync_every):
        state.storage.check()
    assert _file_seqs(state) == table
    again = await api.post(logs, params={"offset": 7}, content=chunk)
    assert again.status_code == 200 and again.json()["offset"] == 7 + len(chunk)
