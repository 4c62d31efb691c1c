"""One host to several: a real `jobd broker` on SQLite with a real `jobd worker` (its own
worker token) runs a job, has finished one, preempted one that checkpointed, and queues
one; the broker alone is stopped (the agent and the jobs' supervisors carry on), the
store is moved with `jobd migrate-store` into a fresh PostgreSQL database, and the broker
starts again on it with the same data directory and tokens.

Then: the finished and queued jobs read as they did; the running job is still running
at its attempt, and when it ends the agent's report of it is accepted; `job resume` of the
preempted job runs from its checkpoint; a new job's id follows the old ones. A second
`migrate-store` into the now-used database is refused, naming what it holds (exit 3).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import BIN, Lab, write_script

pytestmark = pytest.mark.postgres

CHECKPOINTS = """\
import os, sys, time
from pathlib import Path
from jobd.client import install_preemption_handler

if os.environ.get("RESUME_FROM"):
    print("resumed at", Path(os.environ["RESUME_FROM"]).read_text())
    sys.exit(0)
here = Path(os.environ["JOBD_CHECKPOINT_DIR"])
install_preemption_handler(lambda remaining: (here / "latest.txt").write_text("step 7"))
time.sleep(120)
"""
UNTIL_GO = """\
import sys, time
from pathlib import Path
while not Path(sys.argv[1]).exists():
    time.sleep(0.05)
"""


class MovingLab(Lab):
    """A broker on SQLite and one worker `w1` speaking with a worker token of its own."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        made = self.jobd("token", "create", "--role", "worker", "--worker", "w1", "--name", "w1")
        token = root / "w1.token"
        token.write_text(made.stdout.strip())
        token.chmod(0o600)
        self.start(
            "w1", "worker", "--name", "w1", "--gpus", "none", "--slots", "4",
            "--state-dir", str(root / "data" / "worker" / "w1"), "--token-file", str(token),
        )  # fmt: skip
        self.wait_workers(1)

    def jobd(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(BIN / "jobd"), *args], env=self.env, cwd=self.root,
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip

    def submit(self, *args: str) -> int:
        said = self.job("submit", "--cwd", str(self.root), *args)
        assert said.returncode == 0, said.stderr
        return int(said.stdout.strip())

    def phase(self, job_id: int, *phases: str) -> dict[str, Any]:
        found: dict[str, Any] = {}

        def reached() -> bool:
            found.update(self.api("GET", f"/jobs/{job_id}"))
            return bool(found["status"]["phase"] in phases)

        self.wait_until(reached)
        return found


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[MovingLab]:
    made = MovingLab(tmp_path)
    yield made
    made.close()


def test_running_jobs_carry_on_across_the_move(postgres_url: str, lab: MovingLab) -> None:
    python = sys.executable
    finished = lab.submit("--", "true")
    lab.phase(finished, "Succeeded")
    go = lab.root / "go"
    running = lab.submit("--", *write_script(lab.root, "until_go.py", UNTIL_GO), str(go))
    preempted = lab.submit("--preemptible", "--", *write_script(lab.root, "ck.py", CHECKPOINTS))
    lab.phase(running, "Running")
    lab.phase(preempted, "Running")
    assert lab.job("preempt", str(preempted)).returncode == 0
    lab.phase(preempted, "Preempted")
    queued = lab.submit("--depends-on", str(running), "--", python, "-c", "pass")
    before = {j: lab.phase(j, "Succeeded", "Pending", "Preempted") for j in (finished, queued)}
    before[preempted] = lab.phase(preempted, "Preempted")
    attempt = lab.phase(running, "Running")["status"]["attempt"]

    lab.stop("broker")
    moved = lab.jobd(
        "migrate-store", "--from", f"sqlite:///{lab.root}/data/jobd.db", "--to", postgres_url,
        "-o", "json",
    )  # fmt: skip
    assert moved.returncode == 0, moved.stderr
    summary = json.loads(moved.stdout)
    assert summary["rows"]["jobs"] == 4 and summary["rows"]["tokens"] == 1
    assert summary["to"].startswith("postgresql://")  # as given, no password shown
    assert "jobs: 4 rows copied" in moved.stderr
    lab.start_broker("--db", postgres_url, log="broker-on-postgresql")

    for job_id, doc in before.items():
        assert lab.api("GET", f"/jobs/{job_id}") == doc
    still = lab.phase(running, "Running")
    assert still["status"]["attempt"] == attempt and still["status"]["worker"] == "w1"
    go.touch()  # the job ends now: its agent's report goes to the broker on PostgreSQL
    done = lab.phase(running, "Succeeded")
    assert done["status"]["attempt"] == attempt
    lab.phase(queued, "Succeeded")  # its parent's end, heard on PostgreSQL, let it run

    resumed = int(lab.job("resume", str(preempted)).stdout.strip())
    assert resumed > queued
    lab.phase(resumed, "Succeeded")
    output = lab.job("logs", str(resumed)).stdout
    assert "resumed at step 7" in output
    fresh = lab.submit("--", "true")
    assert fresh > resumed

    again = lab.jobd("migrate-store", "--from", f"sqlite:///{lab.root}/data/jobd.db",
                     "--to", postgres_url)  # fmt: skip
    assert again.returncode == 3, again.stderr
    assert "is not empty: " in again.stderr and "jobs (" in again.stderr
