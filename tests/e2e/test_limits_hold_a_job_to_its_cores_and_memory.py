"""Limits enforced on the host (issue 23 item 3), on real processes: a real `jobd broker`
and two real `jobd worker`s on this host.

- `capped` enforces memory as the host best allows (a cgroup as root: v1 here, v2 where
  delegated), `watched` is forced to watch RSS (`--memory-enforcement rss`); both pin
  CPUs by affinity, and `job workers -o wide` says so.
- A job allocating past its `memory` ends Failed `MemoryLimitExceeded` with its peak in
  the message, on either, while the neighbour job on the same worker runs on and the
  agent's RSS stays flat.
- A job naming cpus runs on the cores it was given (`Cpus_allowed_list` of its process,
  read from /proc, is its status.cpuset) with OMP_NUM_THREADS and MKL_NUM_THREADS set to
  its count, unless its env sets them.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e import harness
from tests.e2e.harness import BIN, process_alive

WORKERS = ("capped", "watched")
# Prints what it was given, then sleeps; its argv carries a marker to find its process by.
NEIGHBOUR = (
    "import os, sys, time; "
    "print(os.environ.get('OMP_NUM_THREADS'), os.environ.get('MKL_NUM_THREADS'), flush=True); "
    "time.sleep(120)"
)
# Grows by 16 MiB every 20 ms, touching every page (to 3 GiB if nothing stops it).
HOG = (
    "import time\nheld = []\nfor _ in range(192):\n"
    "    held.append(bytearray(16 << 20))\n    time.sleep(0.02)\n"
)


class Lab(harness.Lab):
    def __init__(self, root: Path) -> None:
        super().__init__(root)
        for name in WORKERS:
            self.start_worker(name)
        self.wait_workers(2)

    def start_worker(self, name: str) -> None:
        how = "rss" if name == "watched" else "auto"
        self.start(
            name, "worker", "--name", f"{name}-{os.getpid()}", "--gpus", "none",
            "--slots", "4", "--cpus", "4", "--memory", "4GiB",
            "--memory-enforcement", how,
            "--state-dir", str(self.root / "data" / "worker" / name),
        )  # fmt: skip

    def restart_worker(self, name: str) -> None:
        """SIGTERM the agent (its jobs run on under their shims) and start it again."""
        self.processes[name].terminate()
        self.processes[name].wait(10)
        self.start_worker(name)

    def worker(self, name: str) -> str:
        return f"{name}-{os.getpid()}"

    def submit(self, worker: str, code: str, *args: str) -> int:
        said = self.job(
            "submit", "--cwd", str(self.root), "--worker", self.worker(worker), *args,
            "--", sys.executable, "-c", code, f"marker-{self.root.name}-{worker}",
        )  # fmt: skip
        assert said.returncode == 0, said.stderr
        return int(said.stdout.strip())

    def agent_rss(self, worker: str) -> int:
        return _vm_rss(self.processes[worker].pid)


def _vm_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for {pid}")


def _cores(text: str) -> list[int]:
    """A Cpus_allowed_list (`0-2,5`) as core numbers."""
    cores: list[int] = []
    for part in text.split(","):
        first, _, last = part.partition("-")
        cores.extend(range(int(first), int(last or first) + 1))
    return cores


def _allowed(pid: int) -> list[int]:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Cpus_allowed_list:"):
            return _cores(line.split()[1])
    raise AssertionError(f"no Cpus_allowed_list for {pid}")


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    running = Lab(tmp_path_factory.mktemp("limits"))
    yield running
    running.close()


def test_each_worker_says_how_it_enforces_limits(lab: Lab) -> None:
    specs = {w["metadata"]["name"]: w["spec"] for w in lab.api("GET", "/workers")["items"]}
    capped = specs[lab.worker("capped")]["enforcement"]
    watched = specs[lab.worker("watched")]["enforcement"]
    assert watched == {"cpu": "affinity", "memory": "rss-watch"}
    if os.geteuid() == 0:  # root may make memory cgroups where a hierarchy has them
        assert capped["memory"] in ("cgroup-v1", "cgroup-v2"), capped
    wide = lab.job("workers", "-o", "wide")
    assert wide.returncode == 0, wide.stderr
    assert f"affinity,{capped['memory']}" in wide.stdout.split()
    assert "affinity,rss-watch" in wide.stdout.split()


@pytest.mark.parametrize("worker", WORKERS)
def test_a_job_over_its_memory_ends_alone_and_says_its_peak(lab: Lab, worker: str) -> None:
    neighbour = lab.submit(worker, NEIGHBOUR, "--memory", "256MiB")
    lab.wait_phase(neighbour, "Running")
    rss_before = lab.agent_rss(worker)

    hog = lab.submit(worker, HOG, "--memory", "64MiB")
    doc = lab.wait_phase(hog, "Failed", "Succeeded")

    assert doc["status"]["reason"] == "MemoryLimitExceeded", doc["status"]
    assert "peak" in doc["status"]["message"] and "limit 64MiB" in doc["status"]["message"]
    assert lab.api("GET", f"/jobs/{neighbour}")["status"]["phase"] == "Running"
    assert lab.agent_rss(worker) < rss_before + (32 << 20), "the agent's RSS stays flat"
    assert lab.processes[worker].poll() is None
    assert lab.job("cancel", str(neighbour)).returncode == 0
    lab.wait_phase(neighbour, "Cancelled")


def test_a_job_runs_on_its_cores_with_its_thread_count(lab: Lab) -> None:
    one = lab.submit("capped", NEIGHBOUR, "--cpus", "1")
    two = lab.submit("capped", NEIGHBOUR.replace("time.sleep", "(time.sleep)"), "--cpus", "1.5")
    set_threads = lab.submit("watched", NEIGHBOUR, "--cpus", "0.5", "--env", "OMP_NUM_THREADS=3")
    every = sorted(os.sched_getaffinity(0))
    seen: dict[int, list[int]] = {}
    for job_id, worker in ((one, "capped"), (two, "capped"), (set_threads, "watched")):
        doc = lab.wait_phase(job_id, "Running")
        deadline = time.monotonic() + 10
        while not doc["status"].get("cpuset"):  # said with `started`, just after Running
            assert time.monotonic() < deadline, doc["status"]
            time.sleep(0.05)
            doc = lab.api("GET", f"/jobs/{job_id}")
        marker = f"marker-{lab.root.name}-{worker}"
        seen[job_id] = _allowed(_find(marker, job_id))
        assert seen[job_id] == doc["status"]["cpuset"], "pinned to what its status says"
    assert len(seen[one]) == 1 and len(seen[two]) == min(2, len(every))
    if len(every) >= 3:
        assert not set(seen[one]) & set(seen[two]), "whole cpus get cores of their own"
    assert _logs(lab, one) == "1 1"
    assert _logs(lab, two) == "2 2"
    assert _logs(lab, set_threads) == "3 1", "the job's own OMP_NUM_THREADS is kept"
    assert lab.job("cancel", str(one), str(two), str(set_threads)).returncode == 0


def _find(marker: str, job_id: int) -> int:
    """The workload of job_id: the process with marker whose JOBD_JOB_ID is job_id."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if marker.encode() in argv and f"JOBD_JOB_ID={job_id}".encode() in environ:
            return int(entry.name)
    raise AssertionError(f"no workload of job {job_id}")


def _logs(lab: Lab, job_id: int) -> str:
    deadline = time.monotonic() + 10
    while not (out := lab.job("logs", str(job_id)).stdout.strip()):
        assert time.monotonic() < deadline, f"job {job_id} printed nothing"
        time.sleep(0.1)
    return out


def _pinned_cores(lab: Lab, job_id: int) -> list[int]:
    doc = lab.wait_phase(job_id, "Running")
    deadline = time.monotonic() + 10
    while not doc["status"].get("cpuset"):
        assert time.monotonic() < deadline, doc["status"]
        time.sleep(0.05)
        doc = lab.api("GET", f"/jobs/{job_id}")
    cores: list[int] = doc["status"]["cpuset"]
    return cores


def test_a_restarted_agent_keeps_the_cores_of_the_jobs_it_readopts(lab: Lab) -> None:
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one core: every job shares it")
    first = lab.submit("capped", NEIGHBOUR, "--cpus", "1")
    held = _pinned_cores(lab, first)

    lab.restart_worker("capped")
    second = lab.submit("capped", NEIGHBOUR, "--cpus", "1")

    assert lab.api("GET", f"/jobs/{first}")["status"]["phase"] == "Running"
    assert not set(_pinned_cores(lab, second)) & set(held), "the readopted job's core is held"
    assert lab.job("cancel", str(first), str(second)).returncode == 0


# Leaves a daemon outside its group and session (a double fork and setsid), which writes
# its pid to argv[1], then sleeps.
ESCAPES = """
import os, sys, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        time.sleep(0.2)
        open(sys.argv[1] + '.tmp', 'w').write(str(os.getpid()))
        os.rename(sys.argv[1] + '.tmp', sys.argv[1])
        time.sleep(120)
    os._exit(0)
time.sleep(120)
"""


def test_what_escaped_a_capped_job_whose_shim_was_killed_goes_with_its_cgroup(
    lab: Lab, tmp_path: Path
) -> None:
    pid_file = tmp_path / "daemon.pid"
    job_id = lab.submit("capped", ESCAPES.replace("sys.argv[1]", repr(str(pid_file))),
                        "--memory", "256MiB")  # fmt: skip
    lab.wait_phase(job_id, "Running")
    deadline = time.monotonic() + 10
    while not pid_file.exists():
        assert time.monotonic() < deadline, "the daemon never said its pid"
        time.sleep(0.05)
    daemon = int(pid_file.read_text())
    attempt = lab.api("GET", f"/jobs/{job_id}")["status"]["attempt"]
    state_dir = lab.root / "data" / "worker" / "capped" / "jobs" / f"{job_id}-{attempt}"
    record = json.loads((state_dir / "supervisor.json").read_text())

    os.kill(record["supervisor_pid"], signal.SIGKILL)

    doc = lab.wait_phase(job_id, "Failed")
    assert doc["status"]["reason"] == "supervisor_lost", doc["status"]
    deadline = time.monotonic() + 10
    while process_alive(daemon):
        assert time.monotonic() < deadline, "the escaped daemon outlived its job's cgroup"
        time.sleep(0.05)


def test_a_worker_that_may_make_no_cgroup_refuses_to_start_when_told_to_use_one(
    tmp_path: Path,
) -> None:
    """As `nobody` (who may write no cgroup), `--memory-enforcement cgroup` is one
    sentence and exit 1, before the worker says anything to a broker."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        reason = "needs root and setpriv (util-linux) to start a worker as nobody"
        if os.environ.get("CI", "").strip().lower() in {"true", "1"}:
            pytest.fail(f"CI=true and {reason}", pytrace=False)
        pytest.skip(reason)
    tmp_path.chmod(0o777)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "JOBD_DATA_DIR": str(tmp_path)}
    as_nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    said = subprocess.run(
        [*as_nobody, str(BIN / "jobd"), "worker", "--memory-enforcement", "cgroup",
         "--gpus", "none", "--server", "http://127.0.0.1:9"],
        env=env, capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert said.returncode == 1, said.stderr
    [line] = said.stderr.splitlines()
    assert line.startswith("jobd: error: --memory-enforcement cgroup: this worker may make no")
