"""Dependencies cascade, any-exit children run, and cancel reaches every process of a job."""

from __future__ import annotations

import sys
import time

from tests.e2e.harness import Jobd, manifest, process_alive, write_script

CHILD_IGNORES_TERM = """\
import os, signal, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c",
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"])
open(sys.argv[1], "w").write(f"{os.getpid()} {child.pid}")
print("ready", flush=True)
time.sleep(600)
"""


def test_failed_parent_cancels_children_transitively_but_any_exit_child_runs(jobd: Jobd) -> None:
    fail = [sys.executable, "-c", "raise SystemExit(3)"]
    ok = [sys.executable, "-c", "print('ran')"]
    docs = [
        manifest("parent", fail),
        manifest("child", ok, depends_on=["parent"]),
        manifest("grandchild", ok, depends_on=["child"]),
        manifest("finally", ok, depends_on=["parent"], depends_on_any_exit=True),
    ]
    jobd.ok("apply", "-f", "-", input="\n---\n".join(docs))
    assert jobd.wait_phase("parent", "Failed")["status"]["exit_code"] == 3
    for name in ("child", "grandchild"):
        doc = jobd.wait_phase(name, "Cancelled")
        assert doc["status"]["reason"] == "dependency_failed"
        cancelled = jobd.events(event="job_cancelled", job=doc["metadata"]["id"])
        assert cancelled[0]["reason"] == "dependency_failed"
    assert jobd.wait_phase("finally", "Succeeded")["status"]["exit_code"] == 0


def test_child_waits_for_parent_to_succeed(jobd: Jobd) -> None:
    slow = [sys.executable, "-c", "import time; time.sleep(0.5)"]
    ok = [sys.executable, "-c", "print('after')"]
    jobd.ok(
        "apply",
        "-f",
        "-",
        input=manifest("first", slow) + "\n---\n" + manifest("then", ok, depends_on=["first"]),
    )
    then_now, first_now = jobd.get("then"), jobd.get("first")  # in this order
    if first_now["status"]["phase"] in ("Pending", "Scheduled", "Running"):
        assert then_now["status"]["phase"] == "Pending"  # (a slow CLI may see first done)
    first = jobd.wait_phase("first", "Succeeded")
    then = jobd.wait_phase("then", "Succeeded")
    assert then["status"]["started_at"] >= first["status"]["finished_at"]


def test_cancel_kills_a_job_whose_child_ignores_sigterm(jobd: Jobd) -> None:
    pids = jobd.root / "pids.txt"
    command = [*write_script(jobd.root, "stubborn.py", CHILD_IGNORES_TERM), str(pids)]
    job_id = jobd.ok(
        "submit", "--name", "stubborn", "--checkpoint-grace", "1", "--", *command
    ).strip()
    jobd.wait_phase(job_id, "Running")
    deadline = time.monotonic() + 10
    while not pids.exists() or not pids.read_text():
        assert time.monotonic() < deadline, "the workload never wrote its pids"
        time.sleep(0.05)
    main_pid, child_pid = map(int, pids.read_text().split())
    started = time.monotonic()
    jobd.ok("cancel", job_id)
    wait = jobd.job("wait", job_id)
    assert wait.returncode != 0  # Cancelled is not Succeeded
    doc = jobd.get(job_id)
    assert doc["status"]["phase"] == "Cancelled"
    assert time.monotonic() - started < 8
    assert not process_alive(main_pid)
    assert not process_alive(child_pid)


def test_cancel_of_a_finished_job_is_refused_and_changes_nothing(jobd: Jobd) -> None:
    job_id = jobd.ok("submit", "--wait", "--", sys.executable, "-c", "pass").strip().splitlines()[0]
    before = jobd.get(job_id)
    refused = jobd.job("cancel", job_id)
    assert refused.returncode != 0
    assert "Succeeded" in refused.stderr
    assert jobd.get(job_id) == before
