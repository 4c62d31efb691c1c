"""A real workload's `jobd-progress` lines reach `job get`, rate-limited, malformed ones ignored.

The workload calls `jobd.client.report_progress()` under a real `jobd dev`; the worker
reads the lines from the stdout it ships and the broker keeps the newest as
`status.progress`, which `job get -o json` shows and the PROGRESS column summarises.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from prometheus_client.openmetrics.parser import text_string_to_metric_families

from tests.e2e.harness import Jobd, write_script

STEADY = """
import pathlib, sys, time
from jobd.client import report_progress

for i in range(1, 6):
    report_progress(i * 10, 100, loss=round(1 / i, 3), stage="train")
    time.sleep(0.05)
print("jobd-progress {not json")
print("jobd-progress [1, 2]")
print('jobd-progress {"step": NaN}')
print("jobd-progress " + "x" * 100000)
sys.stdout.flush()
release = pathlib.Path(sys.argv[1])
deadline = time.monotonic() + 30
while not release.exists() and time.monotonic() < deadline:
    time.sleep(0.02)
"""

CHATTY = """
import time
from jobd.client import report_progress

for i in range(1, 5001):
    report_progress(i, 5000, loss=1 / i)
    if i % 500 == 0:
        time.sleep(0.15)
"""


def _submit(jobd: Jobd, *argv: str) -> str:
    return jobd.ok("submit", "--", *argv).strip()


def _progress_when(jobd: Jobd, job_id: str, done: Any, timeout: float = 20) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        progress = jobd.get(job_id)["status"].get("progress")
        if progress is not None and done(progress):
            return progress  # type: ignore[no-any-return]
        assert time.monotonic() < deadline, f"progress of job {job_id}: {progress}"
        time.sleep(0.1)


def test_progress_lines_reach_job_get_and_its_progress_column(jobd: Jobd, tmp_path: Path) -> None:
    release = tmp_path / "release"
    job_id = _submit(jobd, *write_script(tmp_path, "steady.py", STEADY), str(release))

    progress = _progress_when(jobd, job_id, lambda p: p["step"] == 50)

    assert progress["total"] == 100 and progress["fraction"] == 0.5
    assert progress["metrics"] == {"loss": 0.2, "stage": "train"}
    table = jobd.ok("get", job_id).splitlines()
    assert "PROGRESS" in table[0].split()
    assert " 50/100 50% " in table[1]
    assert _progress_series(jobd) == {
        ("jobd_job_progress_ratio", job_id, None): 0.5,
        ("jobd_job_metric", job_id, "loss"): 0.2,  # numbers only: no `stage`
    }
    release.touch()
    ended = jobd.wait_phase(job_id, "Succeeded")
    assert ended["status"]["progress"]["step"] == 50  # the malformed lines changed nothing
    assert not jobd.events(event="job_progress")
    assert _progress_series(jobd) == {}  # running jobs only


def _progress_series(jobd: Jobd) -> dict[tuple[str, str, str | None], float]:
    """The progress samples of an OpenMetrics scrape (the parser enforces its rules)."""
    accept = {"Accept": "application/openmetrics-text; version=1.0.0"}
    with jobd.api() as api:
        text = api.get("/metrics", headers=accept).text
    return {
        (s.name, s.labels["job_id"], s.labels.get("metric")): s.value
        for family in text_string_to_metric_families(text)
        if family.name in ("jobd_job_progress_ratio", "jobd_job_metric")
        for s in family.samples
    }


def test_a_chatty_job_costs_the_broker_a_write_a_second(jobd: Jobd, tmp_path: Path) -> None:
    job_id = _submit(jobd, *write_script(tmp_path, "chatty.py", CHATTY))

    ended = jobd.wait_phase(job_id, "Succeeded")

    progress = ended["status"]["progress"]
    assert (progress["step"], progress["fraction"]) == (5000, 1.0)  # the last line, with the end
    assert progress["metrics"] == {"loss": 1 / 5000}
    with jobd.api() as api:
        page = api.get("/watch", params={"since": 0, "kind": "Job", "timeout": 0}).json()
    writes = [c for c in page["changes"] if str(c["object"]["metadata"]["id"]) == job_id]
    # 5000 lines in about 1.5 s: created, scheduled, started, a few progress writes, ended
    assert len(writes) < 12, json.dumps([c["object"]["status"].get("progress") for c in writes])
