"""Gangs placed whole on real processes (issue 25): a real `jobd broker` and three real
`jobd worker`s on this host (`w1`, `w2`, `w3`, one slot each), and the `job` command.

- A gang of 3 runs one member on each worker (each member leaves a file named after its
  rank in the job's directory) and succeeds once all have.
- A gang of 4 waits, `job explain` saying it needs 4 workers and 3 can, and holds
  nothing: a job of one node submitted after it runs.
- Two gangs of 2 on the 3 workers never deadlock: the higher priority runs first, the
  other waits whole (no member placed) and runs after it.
- A gang pinned to one worker is refused.
- `job preempt-blockers` frees two workers for a gang of 2, and the gang runs there.

Running members on their workers is the agent's part of issue 25 (branch gang-life):
this file is written for both branches merged.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e import harness

WORKERS = ("w1", "w2", "w3")
_ENDED = ("Succeeded", "Failed", "Cancelled", "Preempted")


def _script(seconds: float) -> str:
    """Leave a file named after the member's rank in the cwd, then sleep."""
    return (
        "import os, pathlib, time; "
        "pathlib.Path(os.environ.get('JOBD_NODE_RANK', 'single')).touch(); "
        f"time.sleep({seconds})"
    )


class Lab(harness.Lab):
    """One broker, three workers of one slot each."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        for name in WORKERS:
            self.start(
                name, "worker", "--name", name, "--gpus", "none", "--slots", "1",
                "--state-dir", str(root / "data" / "worker" / name),
            )  # fmt: skip
        self.wait_workers(len(WORKERS))
        self.made = 0

    def submit(self, *args: str, seconds: float = 120) -> tuple[int, Path]:
        """A job running _script in a directory of its own; its id and the directory."""
        self.made += 1
        cwd = self.root / f"job-{self.made}"
        cwd.mkdir()
        said = self.job("submit", "--cwd", str(cwd), *args, "--",
                        sys.executable, "-c", _script(seconds))  # fmt: skip
        assert said.returncode == 0, said.stderr
        return int(said.stdout.strip()), cwd

    def get(self, job_id: int) -> dict[str, Any]:
        doc: dict[str, Any] = self.api("GET", f"/jobs/{job_id}")
        return doc

    def wait_phase(self, job_id: int, *phases: str, timeout: float = 30) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while (doc := self.get(job_id))["status"]["phase"] not in phases:
            assert time.monotonic() < deadline, f"job {job_id}: {doc['status']}"
            time.sleep(0.05)
        return doc

    def still_pending(self, job_id: int, for_s: float = 1.5) -> dict[str, Any]:
        deadline = time.monotonic() + for_s
        while time.monotonic() < deadline:
            doc = self.get(job_id)
            assert doc["status"]["phase"] == "Pending", doc["status"]
            assert doc["status"]["members"] == [], "a waiting gang holds no worker"
            time.sleep(0.1)
        return doc

    def cancel_all(self, *ids: int) -> None:
        assert self.job("cancel", *map(str, ids)).returncode == 0
        for job_id in ids:
            self.wait_phase(job_id, *_ENDED)


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    running = Lab(tmp_path_factory.mktemp("gangs"))
    yield running
    running.close()


def _workers_of(doc: dict[str, Any]) -> list[str]:
    return [m["worker"] for m in doc["status"]["members"]]


def test_a_gang_of_three_runs_one_member_on_each_worker(lab: Lab) -> None:
    gang, cwd = lab.submit("--nodes", "3", seconds=0.5)
    done = lab.wait_phase(gang, *_ENDED)
    assert done["status"]["phase"] == "Succeeded", done["status"]
    assert sorted(_workers_of(done)) == sorted(WORKERS)
    assert [m["rank"] for m in done["status"]["members"]] == [0, 1, 2]
    assert done["status"]["worker"] == _workers_of(done)[0], "rank 0's worker"
    assert sorted(p.name for p in cwd.iterdir()) == ["0", "1", "2"], "every member ran"


def test_a_gang_of_four_waits_holding_nothing_and_explain_says_why(lab: Lab) -> None:
    gang, _ = lab.submit("--nodes", "4", "--priority", "9")
    waiting = lab.still_pending(gang)
    [said] = [c for c in waiting["status"]["conditions"] if c["type"] == "Scheduled"]
    assert (said["reason"], said["message"]) == (
        "Unschedulable",
        "needs 4 workers that can hold it, 3 can",
    )
    explained = lab.job("explain", str(gang))
    assert explained.returncode == 0, explained.stderr
    assert "needs 4 workers that can hold it, 3 can" in explained.stdout
    assert "3 could take a member now: w1, w2, w3" in explained.stdout
    single, _ = lab.submit("--priority", "1")
    lab.wait_phase(single, "Running")
    lab.cancel_all(gang, single)


def test_two_gangs_of_two_on_three_workers_run_in_priority_order(lab: Lab) -> None:
    blockers = [lab.submit()[0] for _ in WORKERS]
    for blocker in blockers:
        lab.wait_phase(blocker, "Running")
    low, _ = lab.submit("--nodes", "2", "--priority", "1", seconds=2)
    high, _ = lab.submit("--nodes", "2", "--priority", "5", seconds=2)
    lab.cancel_all(*blockers)

    running = lab.wait_phase(high, "Running", "Succeeded")
    assert len(set(_workers_of(running))) == 2
    if running["status"]["phase"] == "Running":
        lab.still_pending(low, for_s=0.5)  # one worker free: the other gang waits whole
    first = lab.wait_phase(high, *_ENDED)
    second = lab.wait_phase(low, *_ENDED, timeout=60)
    assert (first["status"]["phase"], second["status"]["phase"]) == ("Succeeded", "Succeeded")
    assert first["status"]["started_at"] < second["status"]["started_at"]
    assert len(set(_workers_of(second))) == 2


def test_a_gang_pinned_to_one_worker_is_refused(lab: Lab) -> None:
    before = lab.api("GET", "/jobs")["items"]
    said = lab.job("submit", "--nodes", "2", "--worker", "w1", "--", "true")
    assert said.returncode != 0
    assert "--worker" in said.stderr and "2 nodes" in said.stderr, said.stderr
    assert lab.api("GET", "/jobs")["items"] == before


def test_preempt_blockers_frees_two_workers_for_a_gang(lab: Lab) -> None:
    victims = [lab.submit("--priority", str(1 + i), "--preemptible")[0] for i in range(3)]
    for victim in victims:
        lab.wait_phase(victim, "Running")
    gang, _ = lab.submit("--nodes", "2", "--priority", "9")
    lab.still_pending(gang, for_s=0.3)

    freed = lab.job("preempt-blockers", str(gang))
    assert freed.returncode == 0, freed.stderr
    taken = [lab.wait_phase(v, *_ENDED) for v in victims[:2]]
    assert [t["status"]["phase"] for t in taken] == ["Preempted", "Preempted"]
    running = lab.wait_phase(gang, "Running")
    assert sorted(_workers_of(running)) == sorted(t["status"]["worker"] for t in taken)
    said = freed.stdout.splitlines()[-1]  # every worker freed for the gang, not rank 0's
    assert said.startswith(f"preempted 2 jobs so job/{gang} can run on "), said
    assert sorted(said.rsplit(" on ", 1)[1].split(", ")) == sorted(_workers_of(running))
    assert lab.get(victims[2])["status"]["phase"] == "Running", "the highest priority stays"
    lab.cancel_all(gang, victims[2])
