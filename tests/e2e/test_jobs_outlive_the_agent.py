"""Jobs outlive `jobd dev`: a SIGINT or a kill -9 of it stops no job; the next start re-adopts them.

Real `jobd dev`, real supervisors, real workloads: the exit codes after the restart are
the workloads' own, none is started twice, output is complete across the restart, a job
that ends while nothing of jobd runs is reported, a preemption's SIGKILL comes at its
deadline with no agent, a job that cannot start fails alone, and a flood of output leaves
the agent small and the worker's copy capped to head + tail.
"""

from __future__ import annotations

import json
import os
import signal
import time
from datetime import datetime
from pathlib import Path

import pytest

from jobd.api.models import Job, JobSpec, ObjectMeta
from jobd.controllers.clock import SystemClock
from jobd.controllers.verbs.admission import create_jobs
from jobd.store import open_store, sqlite_url
from tests.e2e.harness import Jobd, manifest, process_alive, start_jobd, stop_jobd, write_script

# Prints numbered lines (or stays silent), appends its pid to a file at each start, waits
# for a go file, then exits with the code it was given.
WORKLOAD = """
import os, sys, time
name, code, go, printing = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4] == "1"
with open(name + ".starts", "a") as f:
    f.write(f"{os.getpid()}\\n")
i = 0
while not os.path.exists(go):
    if printing:
        print(f"line {i}", flush=True)
        i += 1
    time.sleep(0.02)
if printing:
    print(f"last {i}", flush=True)
sys.exit(code)
"""

STUBBORN = """
import os, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
open(sys.argv[1], "w").write(str(os.getpid()))
time.sleep(120)
"""


def _state_dir(jobd: Jobd, job_id: int) -> Path:
    [found] = (jobd.root / "data" / "worker" / "w1" / "jobs").glob(f"{job_id}-*")
    return found


def _workload_pid(jobd: Jobd, job_id: int) -> int:
    deadline = time.monotonic() + 10
    while True:
        record = json.loads((_state_dir(jobd, job_id) / "supervisor.json").read_text())
        if record["workload_pid"]:
            return int(record["workload_pid"])
        assert time.monotonic() < deadline
        time.sleep(0.02)


def _ts(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def _apply(jobd: Jobd, name: str, command: list[str], **spec: object) -> int:
    jobd.ok("apply", "-f", "-", input=manifest(name, command, cwd=str(jobd.root), **spec))
    return int(jobd.get(name)["metadata"]["id"])


def _restart(jobd: Jobd, how: int) -> Jobd:
    jobd.process.send_signal(how)
    jobd.process.wait(5)  # promptly: a stop waits for no job
    return start_jobd(jobd.root, "--slots", "4")


@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGKILL], ids=["sigint", "kill-9"])
def test_jobs_survive_a_stop_of_jobd_dev_and_are_readopted(tmp_path: Path, how: int) -> None:
    jobd = start_jobd(tmp_path, "--slots", "4")
    argv = write_script(tmp_path, "work.py", WORKLOAD)
    go = tmp_path / "go"
    ids = {
        name: _apply(jobd, name, [*argv, str(tmp_path / name), str(code), str(go), printing])
        for name, code, printing in [("printer", 3, "1"), ("quiet", 5, "0"), ("ok", 0, "1")]
    }
    for job_id in ids.values():
        jobd.wait_phase(job_id, "Running")
    pids = {name: _workload_pid(jobd, job_id) for name, job_id in ids.items()}
    time.sleep(0.3)
    jobd.process.send_signal(how)
    jobd.process.wait(5)
    if how == signal.SIGINT:
        assert "3 jobs keep running" in (tmp_path / "dev.log").read_text()
    time.sleep(0.5)  # printing on, nobody reading: a pipe would have broken here
    assert all(process_alive(pid) for pid in pids.values())
    go.touch()  # the jobs end while nothing of jobd runs
    deadline = time.monotonic() + 10
    while any(process_alive(pid) for pid in pids.values()):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    jobd = start_jobd(tmp_path, "--slots", "4")
    try:
        phases = {n: jobd.wait_phase(i, "Succeeded", "Failed") for n, i in ids.items()}
        assert {n: d["status"]["exit_code"] for n, d in phases.items()} == {
            "printer": 3,
            "quiet": 5,
            "ok": 0,
        }
        for name in ids:  # none started twice
            assert len((tmp_path / f"{name}.starts").read_text().split()) == 1
        lines = jobd.ok("logs", str(ids["printer"])).splitlines()
        last = int(lines[-1].split()[1])
        assert lines == [f"line {i}" for i in range(last)] + [f"last {last}"]
        readopted = jobd.events(event="job_readopted")
        assert {e["job"] for e in readopted} == set(ids.values())
        assert not jobd.events(event="job_finished", reason="process_vanished")
        wait_gone = time.monotonic() + 5  # shipped and over: the local copy goes
        jobs_dir = tmp_path / "data" / "worker" / "w1" / "jobs"
        while [p for p in jobs_dir.iterdir() if p.is_dir()]:  # supervisors.log stays
            assert time.monotonic() < wait_gone
            time.sleep(0.05)
    finally:
        stop_jobd(jobd)


def _stop_with_sigkill(state_dir: Path) -> dict[str, str]:
    """stopping.json once it records the SIGKILL, which is written just after it is sent."""
    deadline = time.monotonic() + 5
    while True:
        stop: dict[str, str] = json.loads((state_dir / "stopping.json").read_text())
        if stop.get("sigkill_at") or time.monotonic() > deadline:
            return stop
        time.sleep(0.02)


def test_a_preemption_keeps_its_deadline_with_no_agent(tmp_path: Path) -> None:
    jobd = start_jobd(tmp_path, "--slots", "2")
    argv = write_script(tmp_path, "stubborn.py", STUBBORN)
    job_id = _apply(
        jobd,
        "stubborn",
        [*argv, str(tmp_path / "pid")],
        preemptible=True,
        checkpoint_grace_s=2,
    )
    jobd.wait_phase(job_id, "Running")
    pid = _workload_pid(jobd, job_id)
    jobd.ok("preempt", str(job_id))
    jobd.wait_phase(job_id, "Preempting")
    asked = time.monotonic()
    jobd.process.kill()
    jobd.process.wait(5)
    state_dir = _state_dir(jobd, job_id)
    while process_alive(pid):
        assert time.monotonic() - asked < 8, "no SIGKILL at the deadline"
        time.sleep(0.05)
    stop = _stop_with_sigkill(state_dir)
    sigterm_at, sigkill_at = (_ts(stop[k]) for k in ("sigterm_at", "sigkill_at"))
    assert 2.0 <= sigkill_at - sigterm_at < 3.0  # the grace, kept with no agent
    jobd = start_jobd(tmp_path, "--slots", "2")
    try:
        doc = jobd.wait_phase(job_id, "Preempted", "Failed")
        assert doc["status"]["phase"] == "Preempted"
        assert doc["status"]["exit_signal"] == signal.SIGKILL
    finally:
        stop_jobd(jobd)


def test_a_job_that_cannot_start_fails_alone(tmp_path: Path) -> None:
    jobd = start_jobd(tmp_path, "--slots", "2")
    try:
        argv = write_script(tmp_path, "work.py", WORKLOAD)
        go = tmp_path / "go"
        good = _apply(jobd, "good", [*argv, str(tmp_path / "good"), "0", str(go), "1"])
        jobd.wait_phase(good, "Running")
        bad_doc = manifest("bad", ["python3", "-c", "pass"], cwd="/nonexistent/dir")
        jobd.ok("apply", "-f", "-", input=bad_doc)
        bad = jobd.wait_phase("bad", "Failed", "Succeeded")
        assert bad["status"]["reason"] == "start_failed"
        assert "/nonexistent/dir does not exist" in bad["status"]["message"]
        assert jobd.get(good)["status"]["phase"] == "Running"
        assert jobd.process.poll() is None
        go.touch()
        assert jobd.wait_phase(good, "Succeeded", "Failed")["status"]["phase"] == "Succeeded"
    finally:
        stop_jobd(jobd)


def test_a_poison_row_written_behind_the_brokers_back_fails_alone(tmp_path: Path) -> None:
    """What an older broker accepted (a NUL in argv, an env key with `=`) fails alone."""
    jobd = start_jobd(tmp_path, "--slots", "3")
    argv = write_script(tmp_path, "work.py", WORKLOAD)
    go = tmp_path / "go"
    good = _apply(jobd, "good", [*argv, str(tmp_path / "good"), "4", str(go), "1"])
    jobd.wait_phase(good, "Running")
    stop_jobd(jobd, end_jobs=False)  # the job runs on; the broker is away
    store = open_store(sqlite_url(tmp_path / "data"))
    try:
        poison = [
            Job(metadata=ObjectMeta(name="nul", project="default"), spec=spec)
            for spec in (
                JobSpec(command=["echo", "a\0b"], cwd=str(tmp_path)),
                JobSpec(command=["true"], cwd=str(tmp_path), env={"A=B": "1"}),
            )
        ]
        poison[1].metadata.name = "eq"
        created = create_jobs(store, poison, SystemClock())
    finally:
        store.close()
    jobd = start_jobd(tmp_path, "--slots", "3")
    try:
        for job, words in zip(created, ["NUL", "="], strict=True):
            doc = jobd.wait_phase(job.id, "Failed", "Succeeded")
            assert doc["status"]["reason"] == "start_failed"
            assert words in doc["status"]["message"]
        assert jobd.get(good)["status"]["phase"] == "Running"
        assert jobd.process.poll() is None
        go.touch()
        doc = jobd.wait_phase(good, "Succeeded", "Failed")
        assert doc["status"]["exit_code"] == 4
        assert len((tmp_path / "good.starts").read_text().split()) == 1
    finally:
        stop_jobd(jobd)


def test_an_output_flood_is_capped_on_the_worker_and_the_agent_stays_small(
    tmp_path: Path,
) -> None:
    cap = 1 << 20
    jobd = start_jobd(tmp_path, "--slots", "1", "--keep-job-files", "--max-log-bytes", str(cap))
    try:
        flood = ["sh", "-c", "yes 0123456789abcdefghijklmnopqrstuvwxyz | head -c 500000000"]
        job_id = _apply(jobd, "flood", flood)
        jobd.wait_phase(job_id, "Succeeded", timeout=120)
        path = _state_dir(jobd, job_id) / "stdout"
        deadline = time.monotonic() + 30
        while not json.loads((path.parent / "agent.json").read_text())["drained"]:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        stat = path.stat()
        assert stat.st_size == 500_000_000  # offsets stay what they were
        assert stat.st_blocks * 512 <= cap + 3 * 4096  # head + tail, to the block
        with path.open("rb") as f:
            head = f.read(cap // 2)
            f.seek(-(cap // 2), os.SEEK_END)
            tail = f.read()
        assert head.startswith(b"0123456789") and b"0123456789" in tail
        assert b"\0" not in head and b"\0" not in tail  # both read back, not holes
        peak_kb = _peak_rss_kb(jobd.process.pid)
        assert peak_kb < 300 * 1024, f"jobd dev peaked at {peak_kb} kB"
        logs = jobd.ok("logs", str(job_id))
        assert "dropped here]" in logs  # the worker's or the broker's mark of the cut
    finally:
        stop_jobd(jobd)


def _peak_rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


def test_the_supervisor_launcher_is_no_job_of_the_terminal(tmp_path: Path) -> None:
    """Ctrl-C reaches the terminal's whole process group; the jobs are not in it."""
    jobd = start_jobd(tmp_path, "--slots", "1")
    try:
        job_id = _apply(jobd, "sleeper", ["sleep", "30"])
        jobd.wait_phase(job_id, "Running")
        pid = _workload_pid(jobd, job_id)
        assert os.getpgid(pid) != os.getpgid(jobd.process.pid)
        assert os.getsid(pid) != os.getsid(jobd.process.pid)
        jobd.ok("cancel", str(job_id))
        jobd.wait_phase(job_id, "Cancelled")
    finally:
        stop_jobd(jobd)
