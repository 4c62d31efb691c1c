"""A real `jobd worker` runs jobs, reports them and heartbeats without ever importing
pydantic (nor the broker's models): it reads the watch's JSON through `JobView` and sends
its bodies as plain JSON, which the broker validates. The worker's imports are listed by
the interpreter itself (`-X importtime`, through PYTHONPROFILEIMPORTTIME), lazy ones
included, from its start to its end after a job started, ran, failed and was reported.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from jobd.bench.harness import running_broker

pytestmark = pytest.mark.anyio

FORBIDDEN = ("pydantic", "pydantic_core", "jobd.api.models", "jobd.wire.models", "httpx")


async def _ended(http: object, job_id: int) -> dict[str, object]:
    get = http.get  # type: ignore[attr-defined]
    while True:
        job = (await get(f"/jobs/{job_id}")).json()
        if job["status"]["phase"] in ("Succeeded", "Failed"):
            return dict(job["status"])
        await anyio.sleep(0.05)


async def test_a_worker_runs_and_reports_jobs_without_loading_pydantic(tmp_path: Path) -> None:
    env = {"PYTHONPROFILEIMPORTTIME": "1", "JOBD_WORKER_DEFAULT_GRACE_S": "5"}
    async with running_broker(tmp_path, "split", slots=2, env=env) as (broker, http):
        documents = [
            {"spec": {"command": ["true"], "cwd": str(tmp_path), "env": {"EPOCHS": "3"}}},
            {"spec": {"command": ["sh", "-c", "exit 3"], "cwd": str(tmp_path)}},
        ]
        ids = []
        for document in documents:
            created = await http.post("/jobs", json=document)
            assert created.status_code == 201, created.text
            ids.append(created.json()["metadata"]["id"])
        with anyio.fail_after(30):
            ended = [await _ended(http, job_id) for job_id in ids]
        assert [status["exit_code"] for status in ended] == [0, 3]
        assert [status["phase"] for status in ended] == ["Succeeded", "Failed"]
        worker = broker.worker_proc
        assert worker is not None and worker.poll() is None
    log = (tmp_path / "worker.log").read_text(errors="replace")
    imported = {
        line.split("|")[-1].strip() for line in log.splitlines() if line.startswith("import time:")
    }
    assert "jobd.worker.agent" in imported and "jobd.worker.jobview" in imported
    loaded = {name for name in imported if name.split(".")[0] in FORBIDDEN or name in FORBIDDEN}
    assert not loaded, f"the worker imported {sorted(loaded)}"
