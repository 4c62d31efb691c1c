"""`job explain` on real processes (issue 23 item 4): a real `jobd broker` and two real
`jobd worker`s of different declared inventories and labels (the placement lab: `small`
2 CPUs 4GiB site=lab1, `big` 8 CPUs 16GiB site=lab2).

A job that waits is told, per worker, what that worker lacks and by how much; its
`Scheduled=False` reason shows in `job get` as squeue shows one; `-o json` parses; the
victims preemption could take are those `job preempt-blockers --dry-run` names; a
selector no worker matches names each worker's label; a cordoned worker says so; a job
that runs says where.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.test_two_workers_place_by_cpus_memory_labels_and_roots import Lab


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    running = Lab(tmp_path_factory.mktemp("explain"))
    yield running
    running.close()


def _explained(lab: Lab, job_id: int) -> dict[str, Any]:
    said = lab.job("explain", str(job_id), "-o", "json")
    assert said.returncode == 0, said.stderr
    answer: dict[str, Any] = json.loads(said.stdout)
    return answer


def _says(answer: dict[str, Any], worker: str) -> list[str]:
    found: list[str] = next(w for w in answer["workers"] if w["worker"] == worker)["says"]
    return found


def test_a_waiting_job_is_told_what_each_worker_lacks(lab: Lab) -> None:
    hog = lab.submit("--cpus", "7", "--memory", "8GiB", "--priority", "1", "--preemptible")
    assert lab.runs_on(hog) == "big"
    waits = lab.submit("--cpus", "4", "--memory", "6GiB", "--priority", "50")
    lab.still_pending(waits, for_s=0.5)

    answer = _explained(lab, waits)
    assert (answer["phase"], answer["reason"]) == ("Pending", "WaitingForCapacity")
    assert _says(answer, "small") == [
        "too small even when empty: cpus (needs 4, has 2)",
        "too small even when empty: memory (needs 6GiB, has 4GiB)",
    ]
    assert _says(answer, "big") == ["short of cpus by 3 (needs 4, 1 free of 8)"]
    assert answer["queue"]["ahead"] == 0
    assert answer["preemption"]["possible"] is True
    assert [v["job"] for v in answer["preemption"]["victims"]] == [hog]
    dry = lab.job("preempt-blockers", str(waits), "--dry-run", "-o", "json")
    assert [v["metadata"]["id"] for v in json.loads(dry.stdout)["victims"]] == [hog]

    text = lab.job("explain", str(waits))
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert lines[0].startswith(f"Job {waits}  default/") and lines[0].endswith("  Pending")
    assert "  Reason:  WaitingForCapacity: no worker it may use has the room free now" in lines
    assert any(line.split()[:3] == ["big", "no", "short"] for line in lines), text.stdout
    assert f"`job preempt-blockers {waits}` would preempt job {hog} (priority 1) on big" in (
        text.stdout
    )

    table = lab.job("get").stdout.splitlines()
    row = next(line.split() for line in table if line.split()[0] == str(waits))
    assert row[4] == "(WaitingForCapacity)"

    assert lab.job("cordon", "small").returncode == 0
    try:
        assert _says(_explained(lab, waits), "small")[0] == "cordoned: no new job is placed there"
    finally:
        assert lab.job("uncordon", "small").returncode == 0
    lab.cancel_all(hog)
    assert lab.runs_on(waits) == "big"
    running = _explained(lab, waits)
    assert running["summary"] == f"job {waits} is Running on big (attempt 1)"
    lab.cancel_all(waits)


def test_a_selector_no_worker_matches_names_each_label(lab: Lab) -> None:
    nowhere = lab.submit("--selector", "site=lab3")
    lab.still_pending(nowhere, for_s=0.3)
    answer = _explained(lab, nowhere)
    assert answer["reason"] == "Unschedulable"
    assert _says(answer, "big") == ["label site=lab2, not lab3"]
    assert _says(answer, "small") == ["label site=lab1, not lab3"]
    assert answer["preemption"]["possible"] is False
    row = next(
        line.split() for line in lab.job("get").stdout.splitlines() if line.startswith(str(nowhere))
    )
    assert row[4] == "(Unschedulable)"
    lab.cancel_all(nowhere)
