"""Two `jobd worker` processes given one `--name`: the second is refused, every job runs once.

An operator copies a unit file, or a host is cloned: two agents say they are the same
worker. Real processes throughout: a real `jobd broker`, real `jobd worker`s.

- With their own state directories, the second agent's registration is refused (409):
  it exits 1 with one sentence naming the worker, the other instance and when its lease
  expires, and every job runs exactly once (one pid, one `process_started` each).
- On one state directory, the second agent refuses to start (the first holds its lock).
- Once the first is killed and its lease (2 s here) has run out, a new instance takes the
  worker over and runs its jobs; what the old instance would still say (a heartbeat, a
  report) is refused 409 and changes nothing.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.harness import BIN, REPO, _free_port, end_all_jobs, process_alive

LEASE_S = 2  # the shortest lease a worker may ask for is 1 s; 2 s leaves room on a busy box


class Cluster:
    """A real broker and real agents that all claim to be worker `w1`."""

    def __init__(self, root: Path) -> None:
        self.root = root
        port = _free_port()
        self.url = f"http://127.0.0.1:{port}"
        base = {k: v for k, v in os.environ.items() if not k.startswith(("JOBD_", "XDG_"))}
        self.env = base | {
            "JOBD_DATA_DIR": str(root / "data"),
            "JOBD_LOG_DIR": str(root / "logs"),
            "JOBD_URL": self.url,
            "JOBD_CONFIG": str(root / "no-config.yaml"),
            "JOBD_WORKER_CHECKPOINT_ROOT": str(root / "ckpt"),
            "PYTHONPATH": str(REPO),
        }
        self.processes: list[subprocess.Popen[bytes]] = []
        self.submitted = 0
        self.broker = self._start("broker", "broker", "--port", str(port))
        self._wait_ready()

    def _start(self, log: str, *args: str) -> subprocess.Popen[bytes]:
        out = (self.root / f"{log}.log").open("wb")
        process = subprocess.Popen(
            [str(BIN / "jobd"), *args], env=self.env, cwd=self.root, stdout=out, stderr=out
        )
        self.processes.append(process)
        return process

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            assert self.broker.poll() is None, (self.root / "broker.log").read_text()
            try:
                if httpx.get(f"{self.url}/readyz", timeout=0.5).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        raise AssertionError("jobd broker not ready in 20 s")

    def worker(self, log: str, state_dir: str) -> subprocess.Popen[bytes]:
        """`jobd worker --name w1` on its own state directory (under root)."""
        return self._start(
            log, "worker", "--name", "w1", "--gpus", "none", "--lease", str(LEASE_S),
            "--state-dir", str(self.root / state_dir),
        )  # fmt: skip

    def api(self) -> httpx.Client:
        token = (self.root / "data" / "admin.token").read_text().strip()
        return httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {token}"})

    def registered(self, process: subprocess.Popen[bytes], log: str, since: int = 0) -> None:
        """Wait until the agent's registration (the `since`+1th of w1) is taken."""
        deadline = time.monotonic() + 20
        while True:
            assert process.poll() is None, (self.root / f"{log}.log").read_text()
            if len(self.events("worker_registered", 0)) > since:
                return
            assert time.monotonic() < deadline, (self.root / f"{log}.log").read_text()
            time.sleep(0.05)

    def instance_of(self, state_dir: str) -> str:
        deadline = time.monotonic() + 20
        path = self.root / state_dir / "instance-id"
        while not path.exists():
            assert time.monotonic() < deadline, f"no {path}"
            time.sleep(0.05)
        return path.read_text().strip()

    def run_jobs(self, count: int) -> None:
        """Submit `count` jobs that each append their pid to runs.txt; wait for all."""
        runs = self.root / "runs.txt"
        for _ in range(count):
            self.submitted += 1
            n = self.submitted
            result = subprocess.run(
                [str(BIN / "job"), "submit", "--name", f"once-{n}", "--wait", "--",
                 sys.executable, "-c",
                 f"import os; open({str(runs)!r}, 'a').write(f'{{os.getpid()}}\\n')"],
                env=self.env, cwd=self.root, capture_output=True, text=True, timeout=60,
            )  # fmt: skip
            assert result.returncode == 0, result.stderr

    def events(self, kind: str, at_least: int) -> list[dict[str, Any]]:
        """The events of this kind, once there are `at_least` (they ride on reports)."""
        deadline = time.monotonic() + 10
        path = self.root / "logs" / "events.jsonl"
        while True:
            lines = path.read_text().splitlines() if path.exists() else []
            found = [e for line in lines if (e := json.loads(line))["event"] == kind]
            if len(found) >= at_least or time.monotonic() > deadline:
                return found
            time.sleep(0.1)

    def close(self) -> None:
        for process in reversed(self.processes):
            if process.poll() is None:
                process.terminate()
                process.wait(10)
        end_all_jobs(self.root)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    running = Cluster(tmp_path)
    yield running
    running.close()


def _refusal(process: subprocess.Popen[bytes], log: Path) -> str:
    """The one sentence a refused agent leaves, once it has exited 1."""
    assert process.wait(20) == 1, log.read_text()
    said = log.read_text()
    assert "Traceback" not in said, said
    [line] = [line for line in said.splitlines() if line.startswith("jobd: error:")]
    return line


def test_a_second_instance_is_refused_and_each_job_runs_once(cluster: Cluster) -> None:
    first = cluster.worker("first", "state-a")
    cluster.registered(first, "first")
    second = cluster.worker("second", "state-b")
    line = _refusal(second, cluster.root / "second.log")
    held_by = cluster.instance_of("state-a")
    assert line.startswith(
        f"jobd: error: worker w1 is held by another instance (instance {held_by} on"
    )
    assert "until its lease expires at 20" in line and line.endswith("another --name")
    cluster.run_jobs(4)
    pids = (cluster.root / "runs.txt").read_text().split()
    assert len(pids) == 4 and len(set(pids)) == 4
    started = cluster.events("process_started", 4)
    assert sorted(e["job"] for e in started) == [1, 2, 3, 4]
    assert not (cluster.root / "state-b" / "jobs").exists() or not any(
        (cluster.root / "state-b" / "jobs").iterdir()
    )
    assert first.poll() is None


def test_a_second_agent_on_the_same_state_directory_refuses_to_start(cluster: Cluster) -> None:
    first = cluster.worker("first", "state-a")
    cluster.registered(first, "first")
    second = cluster.worker("second", "state-a")
    line = _refusal(second, cluster.root / "second.log")
    instance = cluster.instance_of("state-a")
    assert line == (
        f"jobd: error: the state directory {cluster.root / 'state-a'} is in use by another "
        f"jobd agent (pid {first.pid}); stop it, or give this one its own --state-dir"
    )
    assert (cluster.root / "state-a" / "instance-id").stat().st_mode & 0o777 == 0o600
    cluster.run_jobs(2)
    assert len((cluster.root / "runs.txt").read_text().split()) == 2
    assert cluster.instance_of("state-a") == instance and first.poll() is None


def test_a_new_instance_takes_over_once_the_lease_ran_out(cluster: Cluster) -> None:
    first = cluster.worker("first", "state-a")
    cluster.registered(first, "first")
    cluster.run_jobs(1)
    first.send_signal(signal.SIGKILL)
    first.wait(10)
    early = cluster.worker("early", "state-b")  # the killed one's lease still runs
    assert "held by another instance" in _refusal(early, cluster.root / "early.log")
    old = cluster.instance_of("state-a")
    time.sleep(LEASE_S)  # the lease runs out, as the broker observed it
    second = cluster.worker("second", "state-b")
    cluster.registered(second, "second", since=1)
    cluster.run_jobs(2)
    assert len((cluster.root / "runs.txt").read_text().split()) == 3
    assert len(list((cluster.root / "state-b" / "jobs").glob("*"))) <= 2  # ran on the new one
    with cluster.api() as api:
        worker = api.get("/workers/w1").json()
        assert worker["status"]["epoch"] == 2
        late = api.post("/workers/w1/heartbeat", json={"instance": old, "epoch": 1, "running": [1]})
        assert late.status_code == 409 and "held by another instance" in late.json()["detail"]
        report = {"verb": "complete", "job": 1, "exit_code": 7}
        batch = api.post("/workers/w1/reports", json={"instance": old, "reports": [report]})
        assert batch.status_code == 409
        assert api.get("/jobs/1").json()["status"].get("exit_code") == 0
        assert api.get("/workers/w1").json()["status"]["instance"] == cluster.instance_of("state-b")


def test_an_old_instance_that_wakes_up_replaced_stands_down(cluster: Cluster) -> None:
    """A paused agent (SIGSTOP, longer than its lease) is replaced; woken, it is fenced off:
    it stops the job it ran (the broker has ended it) and exits 1, and the job runs once."""
    first = cluster.worker("first", "state-a")
    cluster.registered(first, "first")
    runs = cluster.root / "runs.txt"
    sleeper = (
        f"import os, time; open({str(runs)!r}, 'a').write(f'{{os.getpid()}}\\n'); time.sleep(120)"
    )
    submitted = subprocess.run(
        [str(BIN / "job"), "submit", "--name", "sleeper", "--", sys.executable, "-c", sleeper],
        env=cluster.env, cwd=cluster.root, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert submitted.returncode == 0, submitted.stderr
    deadline = time.monotonic() + 20
    while not runs.exists() or not runs.read_text().strip():
        assert time.monotonic() < deadline, "the job did not start"
        time.sleep(0.05)
    [pid] = map(int, runs.read_text().split())
    first.send_signal(signal.SIGSTOP)
    time.sleep(LEASE_S + 0.5)
    second = cluster.worker("second", "state-b")
    cluster.registered(second, "second", since=1)
    first.send_signal(signal.SIGCONT)
    line = _refusal(first, cluster.root / "first.log")
    assert "must stand down" in line
    deadline = time.monotonic() + 10
    while process_alive(pid):
        assert time.monotonic() < deadline, "the old instance's job still runs"
        time.sleep(0.05)
    assert len(runs.read_text().split()) == 1 and second.poll() is None
