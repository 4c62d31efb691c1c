"""A supervisor serving its second job outlives a kill -9 of `jobd dev` and is re-adopted.

Real `jobd dev` on one slot: two jobs run in turn under one supervisor process; the
agent is killed while the second runs. The restarted agent takes back the second job
alone (the first is over and shipped), never starts it twice, reports its own exit, and
the old supervisor, whose launcher died with the agent, exits once its job is over.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from tests.e2e.harness import Jobd, manifest, process_alive, start_jobd, stop_jobd, write_script

# Appends its pid to a file at each start, waits for a go file, exits with code 7.
WAITS_FOR_GO = """
import os, sys, time
with open(sys.argv[1], "a") as f:
    f.write(f"{os.getpid()}\\n")
while not os.path.exists(sys.argv[2]):
    time.sleep(0.02)
sys.exit(7)
"""

FLAGS = ("--slots", "1", "--keep-job-files")


def _record(jobd: Jobd, job_id: int) -> dict[str, int]:
    jobs_dir = jobd.root / "data" / "worker" / "w1" / "jobs"
    deadline = time.monotonic() + 10
    while True:
        found = list(jobs_dir.glob(f"{job_id}-*/supervisor.json"))
        if found and (record := json.loads(found[0].read_text()))["workload_pid"]:
            return record  # type: ignore[no-any-return]
        assert time.monotonic() < deadline
        time.sleep(0.02)


def _readopted(jobd: Jobd) -> list[int]:
    """The jobs the restarted agent took back, once it says so: jobd answers as ready on the
    worker its store holds from before, while the new agent still warms its shim pool up
    before it registers and ships its events."""
    deadline = time.monotonic() + 10
    while not (found := jobd.events(event="job_readopted")):
        assert time.monotonic() < deadline, "no job_readopted event within 10 s"
        time.sleep(0.05)
    return [e["job"] for e in found]


def _apply(jobd: Jobd, name: str, command: list[str]) -> int:
    jobd.ok("apply", "-f", "-", input=manifest(name, command, cwd=str(jobd.root)))
    return int(jobd.get(name)["metadata"]["id"])


def test_a_supervisor_on_its_second_job_is_readopted_after_kill_9(tmp_path: Path) -> None:
    jobd = start_jobd(tmp_path, *FLAGS)
    first = _apply(jobd, "first", ["true"])
    assert jobd.wait_phase(first, "Succeeded", "Failed")["status"]["exit_code"] == 0
    argv = write_script(tmp_path, "work.py", WAITS_FOR_GO)
    starts, go = tmp_path / "starts", tmp_path / "go"
    second = _apply(jobd, "second", [*argv, str(starts), str(go)])
    jobd.wait_phase(second, "Running")
    record = _record(jobd, second)
    supervisor = record["supervisor_pid"]
    assert _record(jobd, first)["supervisor_pid"] == supervisor  # one process, two jobs
    jobd.process.kill()
    jobd.process.wait(5)
    assert process_alive(supervisor) and process_alive(record["workload_pid"])
    jobd = start_jobd(tmp_path, *FLAGS)
    try:
        assert _readopted(jobd) == [second]
        go.touch()
        assert jobd.wait_phase(second, "Succeeded", "Failed")["status"]["exit_code"] == 7
        assert len(starts.read_text().split()) == 1  # never started twice
        assert jobd.get(first)["status"]["exit_code"] == 0
        deadline = time.monotonic() + 5  # its launcher is gone: no next job will come
        while process_alive(supervisor):
            assert time.monotonic() < deadline, "the old supervisor outlived its job"
            time.sleep(0.05)
    finally:
        stop_jobd(jobd)
