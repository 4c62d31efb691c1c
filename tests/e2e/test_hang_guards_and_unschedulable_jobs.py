"""Hang guards end jobs through SIGTERM and grace, Failed with their reason; a job no
worker could run is said to be unschedulable (issue 13, items 3 and 4).

`jobd dev` here has one worker with two slots and no GPU, so a job asking for a GPU fits
no worker. Each guard is a couple of seconds; each workload writes a file when SIGTERM
reaches it and takes a moment to "checkpoint", so the test sees the grace was given.
"""

from __future__ import annotations

import time
from pathlib import Path

from tests.e2e.harness import Jobd, write_script

# Prints while it runs (never idle) until SIGTERM; then notes it, "checkpoints", exits 0.
CHATTY = """\
import signal, sys, time
from pathlib import Path
def on_term(signum, frame):
    Path(sys.argv[1]).write_text("SIGTERM")
    time.sleep(0.5)
    print("checkpointed", flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
while True:
    print("working", flush=True)
    time.sleep(0.2)
"""
# Prints once, then falls silent (a hang) until SIGTERM.
SILENT = CHATTY.replace(
    'while True:\n    print("working", flush=True)\n    time.sleep(0.2)\n',
    'print("started", flush=True)\ntime.sleep(600)\n',
)


def _submit(jobd: Jobd, *args: str) -> int:
    return int(jobd.ok("submit", *args).strip())


def _timed_out(jobd: Jobd, job_id: int, reason: str) -> dict[str, object]:
    doc = jobd.wait_phase(job_id, "Succeeded", "Failed", "Cancelled", timeout=30)
    status = doc["status"]
    assert (status["phase"], status["reason"]) == ("Failed", reason), status
    conditions = {c["type"]: c for c in status["conditions"]}
    assert conditions["TimedOut"]["reason"] == reason
    assert [e["reason"] for e in jobd.events(event="job_timed_out", job=job_id)] == [reason]
    return doc


def test_max_runtime_ends_a_running_job_through_its_grace(jobd: Jobd, tmp_path: Path) -> None:
    marker = tmp_path / "term"
    argv = [*write_script(tmp_path, "chatty.py", CHATTY), str(marker)]
    job_id = _submit(jobd, "--max-runtime", "2s", "--checkpoint-grace", "10", "--", *argv)
    jobd.wait_phase(job_id, "Running")
    _timed_out(jobd, job_id, "MaxRuntimeExceeded")
    assert marker.read_text() == "SIGTERM"
    assert "checkpointed" in jobd.ok("logs", str(job_id)), "the grace let it finish its work"
    sent = jobd.events(event="signal_sent", job=job_id)
    assert [e["signal"] for e in sent] == ["SIGTERM"]


def test_idle_timeout_ends_a_silent_job_through_its_grace(jobd: Jobd, tmp_path: Path) -> None:
    marker = tmp_path / "term"
    argv = [*write_script(tmp_path, "silent.py", SILENT), str(marker)]
    started = time.monotonic()
    job_id = _submit(jobd, "--idle-timeout", "2", "--checkpoint-grace", "10", "--", *argv)
    _timed_out(jobd, job_id, "IdleTimeout")
    assert time.monotonic() - started >= 2
    assert marker.read_text() == "SIGTERM"
    assert "checkpointed" in jobd.ok("logs", str(job_id))


def test_a_chatty_job_is_not_idle(jobd: Jobd, tmp_path: Path) -> None:
    argv = [*write_script(tmp_path, "chatty.py", CHATTY), str(tmp_path / "term")]
    job_id = _submit(jobd, "--idle-timeout", "1", "--max-runtime", "4", "--", *argv)
    _timed_out(jobd, job_id, "MaxRuntimeExceeded")


def test_a_job_no_worker_could_run_is_said_unschedulable_and_waits(jobd: Jobd) -> None:
    submitted = jobd.job("submit", "--gpus", "3", "--", "true")
    assert submitted.returncode == 0, submitted.stderr
    job_id = int(submitted.stdout.strip())
    assert "no worker has 3 GPUs; the largest has 0" in submitted.stderr
    doc = jobd.get(job_id)
    assert doc["status"]["phase"] == "Pending", "it still waits: a worker may join"
    scheduled = next(c for c in doc["status"]["conditions"] if c["type"] == "Scheduled")
    assert (scheduled["status"], scheduled["reason"]) == ("False", "Unschedulable")
    assert "no worker has 3 GPUs" in jobd.ok("describe", str(job_id))
    assert "unschedulable: no worker has 3 GPUs" in jobd.ok("status")
    assert len(jobd.events(event="job_unschedulable", job=job_id)) == 1
    jobd.ok("cancel", str(job_id))


def test_a_job_that_fits_gets_no_warning(jobd: Jobd) -> None:
    submitted = jobd.job("submit", "--", "true")
    assert submitted.returncode == 0 and submitted.stderr == "", submitted.stderr


def test_max_pending_fails_a_queued_job_at_once(jobd: Jobd) -> None:
    job_id = _submit(jobd, "--gpus", "1", "--max-pending", "1", "--", "true")
    doc = _timed_out(jobd, job_id, "PendingTimeout")
    assert doc["status"].get("started_at") is None, "it never ran"
