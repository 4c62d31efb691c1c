"""The progress report through the broker's HTTP API: fenced, bounded, and eventless.

Driven in-process through httpx.ASGITransport on a real SQLite store (no loops run; the
job is bound here as the scheduler would). A report of the job's run becomes
`status.progress` with its fraction and, from the second one, its ETA, kept in the store
across a restart; one of another run is refused (409) and a body past the bounds is a
422 naming the field; neither changes the job.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import httpx
import pytest

from jobd.broker.state import BrokerConfig
from tests.integration.conftest import TOKEN, bind, broker_client, broker_state, job_document

pytestmark = pytest.mark.anyio


async def _running(api: httpx.AsyncClient) -> tuple[int, int]:
    """A job bound to w1 and started: its id and attempt."""
    created = await api.post("/jobs", json=job_document("train"))
    job_id = int(created.json()["metadata"]["id"])
    bind(api, job_id, "w1")
    started = await api.post(f"/jobs/{job_id}/started", json={"worker": "w1"})
    return job_id, int(started.json()["status"]["attempt"])


async def test_progress_reports_become_status_progress(api: httpx.AsyncClient) -> None:
    job_id, attempt = await _running(api)
    body = {"worker": "w1", "attempt": attempt, "step": 100, "total": 100_000}
    first = await api.post(f"/jobs/{job_id}/progress", json=body)
    await anyio.sleep(0.05)  # the broker's clock is the real one here
    body |= {"step": 400, "metrics": {"loss": 0.5, "stage": "warmup"}}
    second = await api.post(f"/jobs/{job_id}/progress", json=body)

    assert first.status_code == second.status_code == 200
    assert "eta_s" not in first.json()["status"]["progress"]  # no rate from one report
    progress = second.json()["status"]["progress"]
    assert (progress["step"], progress["fraction"], progress["first_step"]) == (400, 0.004, 100)
    assert progress["eta_s"] > 0  # 99 600 steps at 300 per the time between the two
    assert progress["metrics"] == {"loss": 0.5, "stage": "warmup"}
    events = [e.event for e in broker_state(api).store.list_events(job=job_id)]
    assert events == ["job_created", "job_started"]  # no event per report


@pytest.mark.parametrize(
    ("fields", "status", "detail"),
    [
        ({"attempt": 99}, 409, "attempt"),
        ({"worker": "w2"}, 409, "bound to"),
        ({"step": -1}, 422, "step"),
        ({"total": 0}, 422, "total"),
        ({"metrics": {f"m{i}": i for i in range(33)}}, 422, "metrics"),
        ({"metrics": {"k" * 65: 1}}, 422, "metrics"),
        ({"metrics": {"loss": [1]}}, 422, "metrics.loss"),
    ],
)
async def test_a_refused_progress_report_changes_nothing(
    api: httpx.AsyncClient, fields: dict[str, object], status: int, detail: str
) -> None:
    job_id, attempt = await _running(api)
    before = (await api.get(f"/jobs/{job_id}")).json()
    body = {"worker": "w1", "attempt": attempt, "step": 1, **fields}

    refused = await api.post(f"/jobs/{job_id}/progress", json=body)

    assert refused.status_code == status and detail in refused.json()["detail"]
    assert (await api.get(f"/jobs/{job_id}")).json() == before


async def test_the_last_progress_survives_a_broker_restart(tmp_path: Path) -> None:
    config = BrokerConfig(data_dir=tmp_path / "data", log_dir=tmp_path / "logs", token=TOKEN)
    async with broker_client(config) as api:
        job_id, attempt = await _running(api)
        body = {"worker": "w1", "attempt": attempt, "step": 7, "total": 10}
        assert (await api.post(f"/jobs/{job_id}/progress", json=body)).status_code == 200
    async with broker_client(config) as api:
        progress = (await api.get(f"/jobs/{job_id}")).json()["status"]["progress"]
    assert (progress["step"], progress["fraction"]) == (7, 0.7)
