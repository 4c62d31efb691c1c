"""A worker whose state directory's disk fills (a real 5 MiB tmpfs) fails only the job
that filled it, says so, and takes jobs again once space is back.

Real `jobd dev`: a job printing 20 MB ends Failed `OutputDiskFull` naming its output
file, and its files go; a job running beside it all along succeeds; a short job submitted
afterwards runs. A disk filled by something else than a job makes the worker take no job
(its condition says why) until the filler is deleted.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from tests.e2e.harness import Jobd, manifest, start_jobd, stop_jobd, write_script
from tests.tmpfs import fill, mounted_tmpfs

FLOOD = """
import sys
chunk = b"x" * 65535 + b"\\n"
for _ in range(320):  # 20 MiB
    sys.stdout.buffer.write(chunk)
    sys.stdout.flush()
"""

CALM = """
import os, sys, time
print("calm started", flush=True)
while not os.path.exists(sys.argv[1]):
    time.sleep(0.05)
print("calm done", flush=True)
"""

# Goes on writing whatever the disk says, as a logger that drops its errors does.
STUBBORN_FLOOD = """
import os, time
chunk = b"y" * 65535 + b"\\n"
while True:
    try:
        os.write(1, chunk)
    except OSError:
        time.sleep(0.01)
"""

FIVE_LINES = "for i in range(5): print(f'line {i}')"


def _apply(jobd: Jobd, name: str, command: list[str]) -> int:
    jobd.ok("apply", "-f", "-", input=manifest(name, command, cwd=str(jobd.root)))
    return int(jobd.get(name)["metadata"]["id"])


def _until(check: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"not within {timeout} s: {what}"
        time.sleep(0.05)


def _condition(jobd: Jobd) -> dict[str, object] | None:
    with jobd.api() as api:
        [worker] = api.get("/workers").json()["items"]
    found = [c for c in worker["status"].get("conditions", []) if c["type"] == "DiskFull"]
    return found[0] if found and found[0]["status"] == "True" else None


def test_the_job_that_filled_the_disk_fails_saying_so_and_the_others_run(
    tmp_path: Path,
) -> None:
    with mounted_tmpfs(tmp_path / "state", "5m") as state:
        env = {"JOBD_WORKER_STATE_DIR": str(state)}
        jobd = start_jobd(tmp_path, "--slots", "3", env_extra=env)
        try:
            go = tmp_path / "go"
            calm = _apply(jobd, "calm", [*write_script(tmp_path, "calm.py", CALM), str(go)])
            jobd.wait_phase(calm, "Running")
            flood = _apply(jobd, "flood", write_script(tmp_path, "flood.py", FLOOD))
            doc = jobd.wait_phase(flood, "Failed", "Succeeded", timeout=60)
            status = doc["status"]
            assert (status["phase"], status["reason"]) == ("Failed", "OutputDiskFull")
            assert f"{state}/jobs/{flood}-" in status["message"], status["message"]
            assert "stdout" in status["message"]
            _until(lambda: not list((state / "jobs").glob(f"{flood}-*")), 10, "its files go")

            assert jobd.get(calm)["status"]["phase"] == "Running"
            after = _apply(jobd, "after", [sys.executable, "-c", FIVE_LINES])
            jobd.wait_phase(after, "Succeeded", timeout=30)
            assert jobd.ok("logs", str(after)).split("\n")[:5] == [f"line {i}" for i in range(5)]
            go.touch()
            jobd.wait_phase(calm, "Succeeded", timeout=30)
            assert "calm done" in jobd.ok("logs", str(calm))
        finally:
            stop_jobd(jobd)


def test_a_job_that_goes_on_filling_the_disk_is_ended(tmp_path: Path) -> None:
    with mounted_tmpfs(tmp_path / "state", "5m") as state:
        env = {"JOBD_WORKER_STATE_DIR": str(state)}
        jobd = start_jobd(tmp_path, "--slots", "1", env_extra=env)
        try:
            flood = _apply(jobd, "flood", write_script(tmp_path, "flood.py", STUBBORN_FLOOD))
            status = jobd.wait_phase(flood, "Failed", "Succeeded", timeout=30)["status"]
            assert status["reason"] == "OutputDiskFull", status
            assert f"{state}/jobs/{flood}-" in status["message"], status["message"]
            after = _apply(jobd, "after", [sys.executable, "-c", FIVE_LINES])
            jobd.wait_phase(after, "Succeeded", timeout=30)
        finally:
            stop_jobd(jobd)


def test_a_worker_whose_disk_is_full_takes_no_job_until_space_is_back(tmp_path: Path) -> None:
    with mounted_tmpfs(tmp_path / "state", "5m") as state:
        env = {"JOBD_WORKER_STATE_DIR": str(state)}
        jobd = start_jobd(tmp_path, "--slots", "2", env_extra=env)
        try:
            filler = fill(state)
            _until(lambda: _condition(jobd) is not None, 10, "the worker says its disk is full")
            condition = _condition(jobd)
            assert condition is not None and str(state) in str(condition["message"])
            waiting = _apply(jobd, "waiting", [sys.executable, "-c", FIVE_LINES])
            time.sleep(3)
            assert jobd.get(waiting)["status"]["phase"] == "Pending"

            filler.unlink()
            jobd.wait_phase(waiting, "Succeeded", timeout=30)
            assert _condition(jobd) is None
        finally:
            stop_jobd(jobd)
