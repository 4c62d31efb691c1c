"""A supervisor killed with -9 leaves nothing of its job running: the agent kills the job's
process group, sees it gone, and only then reports the job ended and frees its slot.

Real `jobd dev` with one slot, a real pooled supervisor SIGKILLed, a real workload (with a
child in its group) whose pids are checked gone, and a queued job that records, as it
starts, whether the orphans still live.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from pathlib import Path

from tests.e2e.harness import Jobd, manifest, process_alive, start_jobd, stop_jobd, write_script

# Starts a child in its own group, writes both pids, prints, and runs on for two minutes.
ORPHAN = """
import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(f"{os.getpid()} {child.pid}")
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
for i in range(1200):
    print(f"line {i}", flush=True)
    time.sleep(0.1)
"""

# Says, as it starts, whether each pid in the file still runs.
CHECKER = """
import sys
def alive(pid):
    try:
        state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in "ZX"
pids = open(sys.argv[1]).read().split()
print(" ".join("alive" if alive(int(pid)) else "gone" for pid in pids), flush=True)
"""


def _apply(jobd: Jobd, name: str, command: list[str]) -> int:
    jobd.ok("apply", "-f", "-", input=manifest(name, command, cwd=str(jobd.root)))
    return int(jobd.get(name)["metadata"]["id"])


def _wait_for_file(path: Path, within_s: float = 20.0) -> str:
    deadline = time.monotonic() + within_s
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never written"
        time.sleep(0.02)
    return path.read_text()


def _supervisor_pid(jobd: Jobd, job_id: int) -> int:
    [state_dir] = (jobd.root / "data" / "worker" / "w1" / "jobs").glob(f"{job_id}-*")
    return int(json.loads((state_dir / "supervisor.json").read_text())["supervisor_pid"])


def test_a_killed_supervisors_job_is_killed_before_it_is_reported_and_its_slot_reused(
    tmp_path: Path,
) -> None:
    jobd = start_jobd(tmp_path, "--slots", "1")
    pids: list[int] = []
    try:
        pid_file = tmp_path / "orphan.pids"
        orphan = _apply(
            jobd, "orphan", [*write_script(tmp_path, "orphan.py", ORPHAN), str(pid_file)]
        )
        pids = [int(pid) for pid in _wait_for_file(pid_file).split()]
        checker = _apply(
            jobd, "checker", [*write_script(tmp_path, "check.py", CHECKER), str(pid_file)]
        )
        assert jobd.get(checker)["status"]["phase"] == "Pending"  # one slot, taken

        os.kill(_supervisor_pid(jobd, orphan), signal.SIGKILL)
        deadline = time.monotonic() + 10
        while (doc := jobd.get(orphan))["status"]["phase"] == "Running":
            assert time.monotonic() < deadline, "the job was never ended"
            time.sleep(0.02)
        # The broker hears of the end only once nothing of the job runs.
        alive = [pid for pid in pids if process_alive(pid)]
        assert alive == [], f"{alive} still run after the job was reported ended"
        assert doc["status"]["phase"] == "Failed"
        assert doc["status"]["reason"] == "supervisor_lost"

        jobd.wait_phase(checker, "Succeeded")
        assert jobd.ok("logs", str(checker)).split() == ["gone", "gone"]
        assert "line 0" in jobd.ok("logs", str(orphan))  # what it printed before is kept
    finally:
        stop_jobd(jobd)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
