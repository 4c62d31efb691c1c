"""Placement on real processes (issue 23): a real `jobd broker` and two real `jobd worker`s
on this host, each declaring its own inventory, labels and mount roots.

- `small`: 2 CPUs, 4GiB, site=lab1, mount roots shared/ and small-only/;
- `big`: 8 CPUs, 16GiB, site=lab2 and gpu=a100, mount root shared/.

Jobs asking for CPUs and memory land where they fit (best fit) and wait where they do
not, then run once room is freed; a job naming neither still runs by its slot; one no
worker could ever hold is Unschedulable, saying the largest there is. A selector (labels,
In/NotIn expressions) or a pin (`--worker`) decides the worker; a cwd under no mount
root of a worker keeps the job from it, and the condition names the roots that exist.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e import harness
from tests.e2e.harness import manifest

GIB = 1 << 30
SLEEPS = "import time; time.sleep(120)"


class Lab(harness.Lab):
    """One broker, two workers, and the `job` command against them."""

    def __init__(self, root: Path) -> None:
        for sub in ("shared", "small-only", "elsewhere"):
            (root / sub).mkdir()
        super().__init__(root)
        shared, only = str(root / "shared"), str(root / "small-only")
        self.start(
            "small", "worker", "--name", "small", "--gpus", "none", "--slots", "4",
            "--state-dir", str(root / "data" / "worker" / "small"),
            "--cpus", "2", "--memory", "4GiB", "--label", "site=lab1",
            "--mount-root", shared, "--mount-root", only,
        )  # fmt: skip
        self.start(
            "big", "worker", "--name", "big", "--gpus", "none", "--slots", "4",
            "--state-dir", str(root / "data" / "worker" / "big"),
            "--cpus", "8", "--memory", "16GiB", "--label", "site=lab2", "--label", "gpu=a100",
            "--mount-root", shared,
        )  # fmt: skip
        self.wait_workers(2)

    def submit(self, *args: str, cwd: str = "shared") -> int:
        said = self.job("submit", "--cwd", str(self.root / cwd), *args, "--",
                        sys.executable, "-c", SLEEPS)  # fmt: skip
        assert said.returncode == 0, said.stderr
        return int(said.stdout.strip())

    def get(self, job_id: int) -> dict[str, Any]:
        doc: dict[str, Any] = self.api("GET", f"/jobs/{job_id}")
        return doc

    def runs_on(self, job_id: int) -> str:
        """The worker the job runs on, once it does."""
        deadline = time.monotonic() + 30
        while (doc := self.get(job_id))["status"]["phase"] != "Running":
            assert time.monotonic() < deadline, f"job {job_id}: {doc['status']}"
            time.sleep(0.05)
        worker: str = doc["status"]["worker"]
        return worker

    def still_pending(self, job_id: int, for_s: float = 1.5) -> dict[str, Any]:
        deadline = time.monotonic() + for_s
        while time.monotonic() < deadline:
            doc = self.get(job_id)
            assert doc["status"]["phase"] == "Pending", doc["status"]
            time.sleep(0.1)
        return doc

    def cancel_all(self, *ids: int) -> None:
        assert self.job("cancel", *map(str, ids)).returncode == 0
        deadline = time.monotonic() + 30
        for job_id in ids:
            while self.get(job_id)["status"]["phase"] not in ("Cancelled", "Succeeded", "Failed"):
                assert time.monotonic() < deadline, f"job {job_id} did not end"
                time.sleep(0.05)


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    running = Lab(tmp_path_factory.mktemp("placement"))
    yield running
    running.close()


def _unschedulable(doc: dict[str, Any]) -> str | None:
    found = [c for c in doc["status"]["conditions"] if c["reason"] == "Unschedulable"]
    return found[0]["message"] if found else None


def test_each_worker_says_its_inventory_and_labels(lab: Lab) -> None:
    workers = {w["metadata"]["name"]: w["spec"] for w in lab.api("GET", "/workers")["items"]}
    assert (workers["small"]["cpus"], workers["small"]["memory"]) == (2, 4 * GIB)
    assert workers["big"]["labels"]["gpu"] == "a100"
    assert workers["big"]["labels"]["os"] == "linux" and workers["big"]["labels"]["arch"]
    assert workers["small"]["mount_roots"] == [
        str(lab.root / "shared"),
        str(lab.root / "small-only"),
    ]
    wide = lab.job("workers", "-o", "wide")
    assert wide.returncode == 0, wide.stderr
    rows = {line.split()[0]: line.split() for line in wide.stdout.splitlines()[1:]}
    assert "2/2" in rows["small"] and "4GiB/4GiB" in rows["small"]
    assert any("gpu=a100" in cell for cell in rows["big"])
    selected = lab.job("workers", "-l", "site=lab1")
    assert selected.returncode == 0, selected.stderr
    assert [line.split()[0] for line in selected.stdout.splitlines()[1:]] == ["small"]


def test_jobs_land_where_their_cpus_and_memory_fit_and_wait_where_they_do_not(lab: Lab) -> None:
    big = lab.submit("--cpus", "7", "--memory", "8GiB")
    assert lab.runs_on(big) == "big", "only big has 7 CPUs"
    snug = lab.submit("--cpus", "2", "--memory", "4GiB")
    assert lab.runs_on(snug) == "small", "it fills small exactly: the best fit"
    waits = lab.submit("--cpus", "1.5")
    doc = lab.still_pending(waits)
    assert _unschedulable(doc) is None, "it fits big once big has room: it waits, unflagged"
    plain = lab.submit()
    assert lab.runs_on(plain) in ("small", "big"), "naming neither, a slot is enough"
    wide = lab.job("workers", "-o", "wide").stdout
    assert "1/8" in wide.split() and "0/2" in wide.split(), wide

    lab.cancel_all(big)
    assert lab.runs_on(waits) == "big", "room freed on big: the waiting job runs there"

    refused = lab.job(
        "submit", "--cwd", str(lab.root / "shared"), "--memory", "20GiB", "--", "true"
    )
    assert refused.returncode == 0, refused.stderr
    said = "no worker has 20GiB of memory; the largest has 16GiB of memory"
    assert said in refused.stderr
    never = int(refused.stdout.strip())
    assert _unschedulable(lab.get(never)) == said
    lab.cancel_all(snug, waits, plain, never)


def test_selectors_and_pins_choose_the_worker(lab: Lab) -> None:
    on_a100 = lab.submit("--selector", "gpu=a100")
    on_lab1 = lab.submit("--selector", "site=lab1")
    pinned = lab.submit("--worker", "big")
    assert lab.runs_on(on_a100) == "big"
    assert lab.runs_on(on_lab1) == "small"
    assert lab.runs_on(pinned) == "big"
    doc = manifest(
        "not-lab2",
        [sys.executable, "-c", SLEEPS],
        cwd=str(lab.root / "shared"),
        node_affinity=[{"key": "site", "operator": "NotIn", "values": ["lab2"]}],
    )
    assert lab.job("apply", "-f", "-", input=doc).returncode == 0
    not_lab2 = int(lab.api("GET", "/jobs?name=not-lab2")["items"][0]["metadata"]["id"])
    assert lab.runs_on(not_lab2) == "small"
    nowhere = lab.submit("--selector", "site=lab3")
    message = _unschedulable(lab.still_pending(nowhere, for_s=0.5))
    assert message == (
        "no worker may run it (big: label site=lab2, not lab3; small: label site=lab1, not lab3)"
    )
    lab.cancel_all(on_a100, on_lab1, pinned, not_lab2, nowhere)


def test_a_cwd_under_no_mount_root_is_not_placed_there(lab: Lab) -> None:
    only_small = lab.submit(cwd="small-only")
    assert lab.runs_on(only_small) == "small"
    outside = lab.submit(cwd="elsewhere")
    message = _unschedulable(lab.still_pending(outside, for_s=0.5))
    shared, only = lab.root / "shared", lab.root / "small-only"
    assert message == (
        f"no worker may run it (big: cwd {lab.root / 'elsewhere'} is under none of its mount "
        f"roots ({shared}); small: cwd {lab.root / 'elsewhere'} is under none of its mount "
        f"roots ({shared}, {only}))"
    )
    assert json.loads(lab.job("get", str(outside), "-o", "json").stdout)["status"]["phase"] == (
        "Pending"
    )
    lab.cancel_all(only_small, outside)
