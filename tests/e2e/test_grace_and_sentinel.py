"""The worker's side of preemption with real signals: grace, SIGKILL, and the sentinel.

Preemption here is manual (`job preempt`, `job preempt-blockers`), so the sweeper's
thresholds stay at their defaults and never interfere.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.harness import Jobd, process_alive, start_jobd, stop_jobd, write_script

IGNORES_TERM = """\
import os, signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
child = subprocess.Popen([sys.executable, "-c",
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"])
open(sys.argv[1], "w").write(f"{os.getpid()} {child.pid}")
print("ready", flush=True)
time.sleep(600)
"""
FAILING_CHECKPOINT = """\
import time
from jobd.client import install_preemption_handler
def checkpoint(remaining):
    raise RuntimeError("disk full")
install_preemption_handler(checkpoint)
print("ready", flush=True)
time.sleep(600)
"""
SPLIT_SENTINEL = """\
import os, signal, sys, time
def on_term(signum, frame):
    os.write(1, b"saving... jobd-checkpoint-")
    time.sleep(0.3)
    os.write(1, b"complete\\n")
    os._exit(0)
signal.signal(signal.SIGTERM, on_term)
print("ready", flush=True)
time.sleep(600)
"""
EARLY_SENTINEL = """\
import os, signal, sys, time
print("jobd-checkpoint-complete", flush=True)
signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
time.sleep(600)
"""
HELPER_CHECKPOINT = """\
import os, time
from pathlib import Path
from jobd.client import install_preemption_handler, time_remaining
def checkpoint(remaining):
    grace = os.environ["JOBD_CHECKPOINT_GRACE_S"]
    Path(os.environ["JOBD_CHECKPOINT_DIR"], "latest.txt").write_text(f"{remaining:.1f} {grace}")
install_preemption_handler(checkpoint)
print("ready", flush=True)
time.sleep(600)
"""


@pytest.fixture(scope="module")
def one_slot(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Jobd]:
    running = start_jobd(tmp_path_factory.mktemp("grace"), "--slots", "1", "--default-grace", "7")
    yield running
    stop_jobd(running)


def _run(jobd: Jobd, name: str, body: str, *submit: str, args: tuple[str, ...] = ()) -> int:
    command = write_script(jobd.root, f"{name}.py", body) + list(args)
    job_id = int(jobd.ok("submit", "--name", name, *submit, "--", *command).strip())
    jobd.wait_phase(job_id, "Running")
    deadline = time.monotonic() + 10
    while "ready" not in jobd.ok("logs", str(job_id)):
        assert time.monotonic() < deadline, f"{name} never said ready"
        time.sleep(0.05)
    return job_id


def test_job_ignoring_sigterm_is_killed_at_its_grace_with_its_child(one_slot: Jobd) -> None:
    jobd = one_slot
    pids = jobd.root / "pids.txt"
    job_id = _run(jobd, "stubborn", IGNORES_TERM, "--checkpoint-grace", "1", args=(str(pids),))
    main_pid, child_pid = map(int, pids.read_text().split())
    started = time.monotonic()
    jobd.ok("preempt", str(job_id))
    doc = jobd.wait_phase(job_id, "Preempted", timeout=15)
    took = time.monotonic() - started
    assert 1.0 <= took < 6, took
    assert doc["status"]["exit_signal"] == 9
    assert not process_alive(main_pid) and not process_alive(child_pid)
    kills = [e for e in jobd.events(job=job_id, event="signal_sent") if e["signal"] == "SIGKILL"]
    assert kills, "the SIGKILL after the grace is recorded"
    assert not jobd.events(event="checkpoint_complete", job=job_id)


def test_failing_checkpoint_exits_1_and_raises_no_event(one_slot: Jobd) -> None:
    jobd = one_slot
    job_id = _run(jobd, "failing", FAILING_CHECKPOINT)
    jobd.ok("preempt", str(job_id))
    doc = jobd.wait_phase(job_id, "Preempted")
    assert doc["status"]["exit_code"] == 1
    logs = jobd.ok("logs", str(job_id))
    assert "disk full" in logs and "jobd-checkpoint-complete" not in logs
    time.sleep(0.3)
    assert not jobd.events(event="checkpoint_complete", job=job_id)
    assert len(jobd.events(event="auto_preempt", job=job_id)) == 1


def test_sentinel_split_across_two_reads_is_seen(one_slot: Jobd) -> None:
    jobd = one_slot
    job_id = _run(jobd, "split", SPLIT_SENTINEL)
    jobd.ok("preempt", str(job_id))
    assert jobd.wait_phase(job_id, "Preempted")["status"]["exit_code"] == 0
    events = jobd.events(event="checkpoint_complete", job=job_id)
    assert len(events) == 1 and events[0]["candidate_job"] is None
    assert jobd.get(job_id)["status"]["preemption"]["checkpoint_complete"] is True


def test_sentinel_printed_before_sigterm_is_ignored(one_slot: Jobd) -> None:
    jobd = one_slot
    job_id = _run(
        jobd, "early", EARLY_SENTINEL.replace('print("jobd', 'print("ready"); print("jobd')
    )
    time.sleep(0.2)
    jobd.ok("preempt", str(job_id))
    jobd.wait_phase(job_id, "Preempted")
    time.sleep(0.3)
    assert not jobd.events(event="checkpoint_complete", job=job_id)


def test_helper_gets_the_effective_grace_and_writes_into_its_checkpoint_dir(one_slot: Jobd) -> None:
    jobd = one_slot
    job_id = _run(jobd, "helper", HELPER_CHECKPOINT)  # no grace said: the worker's default (7)
    jobd.ok("preempt", str(job_id))
    jobd.wait_phase(job_id, "Preempted")
    remaining, grace = (jobd.root / "ckpt" / str(job_id) / "latest.txt").read_text().split()
    assert grace == "7" and 5.0 < float(remaining) <= 7.0
    assert len(jobd.events(event="checkpoint_complete", job=job_id)) == 1


def test_preempt_refuses_a_job_that_is_not_running(one_slot: Jobd) -> None:
    jobd = one_slot
    done = jobd.ok("submit", "--wait", "--", sys.executable, "-c", "pass").splitlines()[0].strip()
    before = jobd.get(done)
    refused = jobd.job("preempt", done)
    assert refused.returncode != 0 and "only a Running job" in refused.stderr
    assert jobd.get(done) == before


def test_preempt_blockers_dry_run_changes_nothing_then_preempts(one_slot: Jobd) -> None:
    jobd = one_slot
    holder = _run(
        jobd,
        "holder",
        EARLY_SENTINEL.replace('print("jobd', 'print("ready"); print("jobd'),
        "--priority",
        "5",
        "--preemptible",
    )
    queued = int(jobd.ok("submit", "--priority", "50", "--", sys.executable, "-c", "pass").strip())
    before = (jobd.get(holder), jobd.get(queued))
    dry = jobd.ok("preempt-blockers", str(queued), "--dry-run")
    assert f"job/{holder}" in dry
    assert (jobd.get(holder), jobd.get(queued)) == before
    assert not jobd.events(event="auto_preempt", job=holder)
    jobd.ok("preempt-blockers", str(queued))
    assert jobd.wait_phase(holder, "Preempted")["status"]["preemption"]["reason"] == "blockers"
    event = jobd.events(event="auto_preempt", job=holder)[0]
    assert (event["reason"], event["candidate_job"]) == ("blockers", queued)
    assert jobd.wait_phase(queued, "Succeeded")["status"]["exit_code"] == 0


def test_events_jsonl_lines_are_json_with_ts_and_event(one_slot: Jobd) -> None:
    for line in Path(one_slot.root / "logs" / "events.jsonl").read_text().splitlines():
        record = json.loads(line)
        assert record["ts"].endswith("Z") and record["event"]
