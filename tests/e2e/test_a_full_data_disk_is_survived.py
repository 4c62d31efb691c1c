"""A full data disk under a real `jobd dev` (a 4 MiB tmpfs, filled), then space returned.

While it is full, submits get 507 saying what failed and where, none of them is stored,
/readyz fails with the same reason and /healthz stays 200 (the loops live). When the
filler is deleted, with no restart, /readyz recovers and a job that waited Pending the
whole time runs to success.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import httpx

from tests.e2e.harness import start_jobd, stop_jobd
from tests.integration.conftest import job_document
from tests.tmpfs import fill, mounted_tmpfs


def _until(check: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"not within {timeout} s: {what}"
        time.sleep(0.05)


def _phase(api: httpx.Client, job_id: int) -> str:
    return str(api.get(f"/jobs/{job_id}").json()["status"]["phase"])


def test_a_full_data_disk_refuses_writes_and_everything_resumes_when_space_returns(
    tmp_path: Path,
) -> None:
    with mounted_tmpfs(tmp_path / "data", "4m") as data:
        jobd = start_jobd(tmp_path, "--slots", "1")
        try:
            with jobd.api() as api:
                sleeper = job_document(
                    "sleeper", command=[sys.executable, "-c", "import time; time.sleep(2)"]
                )
                blocker = api.post("/jobs", json=sleeper).json()["metadata"]["id"]
                _until(lambda: _phase(api, blocker) == "Running", 20, "the blocker runs")
                queued = api.post("/jobs", json=job_document("queued")).json()["metadata"]["id"]
                assert _phase(api, queued) == "Pending"  # behind the blocker: one slot

                filler = fill(data)
                acknowledged, refused, details = [], [], set()
                for i in range(3000):
                    answer = api.post("/jobs", json=job_document(f"s-{i}"))
                    assert answer.status_code in (201, 507), answer.text
                    if answer.status_code == 201:
                        acknowledged.append(f"s-{i}")
                        continue
                    refused.append(f"s-{i}")
                    details.add(answer.json()["detail"])
                    if len(refused) == 5:
                        break
                assert refused, "the disk never filled"
                assert details == {
                    f"the store at {data / 'jobd.db'} could not write: database or disk is full"
                }
                ready = httpx.get(f"{jobd.url}/readyz")
                assert ready.status_code == 503 and "could not write" in ready.text
                assert httpx.get(f"{jobd.url}/healthz").status_code == 200

                filler.unlink()
                _until(
                    lambda: httpx.get(f"{jobd.url}/readyz").status_code == 200, 10, "ready again"
                )
                _until(lambda: _phase(api, queued) == "Succeeded", 30, "the queued job ran")
                assert _phase(api, blocker) == "Succeeded"
                stored = {j["metadata"]["name"] for j in api.get("/jobs").json()["items"]}
                assert set(acknowledged) <= stored
                assert not set(refused) & stored
            assert "background_task_failed" not in (tmp_path / "dev.log").read_text()
        finally:
            stop_jobd(jobd)
