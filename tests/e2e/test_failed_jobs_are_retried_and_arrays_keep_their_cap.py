"""Retries and array caps on a real `jobd dev` with real processes.

A job failing with exit 1 under `retry: {limit: 2}` runs three attempts, each after a
longer wait, and ends Failed with all three in `status.attempts` (and their output in
`job logs`); a checkpointing job killed by SIGKILL (exit 137) runs again with
`RESUME_FROM` at the checkpoint it left; `--array 0-9%2` never runs more than two
members at once although four slots are free.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from datetime import datetime

import pytest

from tests.e2e.harness import Jobd, manifest, start_jobd, stop_jobd, write_script


@pytest.fixture(scope="module")
def jobd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Jobd]:
    """Four slots: more than the array's cap, so the cap is what holds members back."""
    running = start_jobd(tmp_path_factory.mktemp("jobd"), "--slots", "4")
    yield running
    stop_jobd(running)


FAILING = """
import os, sys
print("attempt ran", os.environ["JOBD_JOB_ID"], flush=True)
sys.exit(1)
"""


def _at(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_a_failing_job_runs_three_attempts_with_growing_waits(jobd: Jobd) -> None:
    command = write_script(jobd.root, "failing.py", FAILING)
    retry = {"limit": 2, "backoff_s": 1, "backoff_max_s": 10}
    doc = manifest("fails", command, cwd=str(jobd.root), retry=retry)
    jobd.ok("apply", "-f", "-", input=doc)
    final = jobd.wait_phase("fails", "Failed", timeout=60)
    status = final["status"]
    attempts = status["attempts"]
    assert [(a["attempt"], a["exit_code"], a["worker"]) for a in attempts] == [
        (1, 1, "w1"),
        (2, 1, "w1"),
        (3, 1, "w1"),
    ]
    assert (status["attempt"], status["retries"], status["exit_code"]) == (3, 2, 1)
    job_id = final["metadata"]["id"]
    retrying = jobd.events(event="job_retrying", job=job_id)
    assert [(e["attempt"], e["wait_s"]) for e in retrying] == [(2, 1.0), (3, 2.0)]
    # Each attempt started no sooner than its wait after the one before ended.
    for before, after, wait in zip(attempts, attempts[1:], (1.0, 2.0), strict=False):
        gap = (_at(after["started_at"]) - _at(before["finished_at"])).total_seconds()
        assert gap >= wait, (gap, wait)
    assert jobd.ok("logs", str(job_id)).splitlines() == [f"attempt ran {job_id}"] * 3


CHECKPOINTING = """
import os, signal, sys
resume = os.environ.get("RESUME_FROM")
if resume:
    print("resumed from", resume, "at", open(resume).read(), flush=True)
    sys.exit(0)
path = os.path.join(os.environ["JOBD_CHECKPOINT_DIR"], "latest.txt")
with open(path, "w") as f:
    f.write("step 5")
print("checkpointed", flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_killed_checkpointing_job_resumes_from_its_checkpoint(jobd: Jobd) -> None:
    command = write_script(jobd.root, "checkpointing.py", CHECKPOINTING)
    retry = {"limit": 1, "backoff_s": 0, "on_exit_codes": [137]}
    jobd.ok("apply", "-f", "-", input=manifest("ckpt", command, cwd=str(jobd.root), retry=retry))
    final = jobd.wait_phase("ckpt", "Succeeded", "Failed", timeout=60)
    job_id = final["metadata"]["id"]
    latest = jobd.root / "ckpt" / str(job_id) / "latest.txt"
    assert final["status"]["phase"] == "Succeeded", final["status"]
    assert final["status"]["resume_from"] == str(latest)
    ends = [(a.get("exit_code"), a.get("exit_signal")) for a in final["status"]["attempts"]]
    assert ends == [(None, 9), (0, None)]
    output = jobd.ok("logs", str(job_id)).splitlines()
    assert output == ["checkpointed", f"resumed from {latest} at step 5"]


MEMBER = """
import sys, time
with open(sys.argv[1], "a") as f:
    f.write(f"start {time.time()}\\n")
time.sleep(0.4)
with open(sys.argv[1], "a") as f:
    f.write(f"end {time.time()}\\n")
"""


def test_an_array_capped_at_two_never_runs_more_than_two(jobd: Jobd) -> None:
    record = jobd.root / "members.txt"
    command = [*write_script(jobd.root, "member.py", MEMBER), str(record)]
    array = jobd.ok("submit", "--array", "0-9%2", "--cwd", str(jobd.root), "--", *command)
    assert jobd.job("wait", array.strip(), timeout=120).returncode == 0
    marks = sorted(
        (float(at), 1 if what == "start" else -1)
        for what, at in (line.split() for line in record.read_text().splitlines())
    )
    assert len(marks) == 20
    running, most = 0, 0
    for _, step in sorted(marks, key=lambda m: (m[0], m[1])):  # an end before a start
        running += step
        most = max(most, running)
    assert most <= 2


ONCE = """
import os, sys
marker = sys.argv[1]
if os.path.exists(marker):
    print("second run", flush=True)
    sys.exit(0)
open(marker, "w").close()
print("first run", flush=True)
sys.exit(1)
"""


def test_a_retry_waiting_out_its_backoff_survives_a_broker_restart(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    root = tmp_path_factory.mktemp("restart")
    jobd = start_jobd(root)
    try:
        command = [*write_script(root, "once.py", ONCE), str(root / "marker")]
        retry = {"limit": 1, "backoff_s": 4}
        jobd.ok("apply", "-f", "-", input=manifest("once", command, cwd=str(root), retry=retry))
        job_id = jobd.get("once")["metadata"]["id"]
        deadline = time.monotonic() + 30
        while not jobd.events(event="job_retrying", job=job_id):
            assert time.monotonic() < deadline, "the first run did not fail in time"
            time.sleep(0.05)
        assert jobd.get(job_id)["status"]["retry_at"]  # stopped within its 4 s backoff
    finally:
        stop_jobd(jobd)
    jobd = start_jobd(root)  # the same store: the timer is taken up again
    try:
        final = jobd.wait_phase(job_id, "Succeeded", "Failed", timeout=60)
        assert final["status"]["phase"] == "Succeeded"
        assert [a["attempt"] for a in final["status"]["attempts"]] == [1, 2]
        assert jobd.ok("logs", str(job_id)).splitlines() == ["first run", "second run"]
    finally:
        stop_jobd(jobd)


def test_submit_retries_then_cancel_during_the_backoff(jobd: Jobd) -> None:
    command = [sys.executable, "-c", "raise SystemExit(1)"]
    job_id = jobd.ok("submit", "--retries", "1", "--", *command).strip()
    assert jobd.get(job_id)["spec"]["retry"]["limit"] == 1
    deadline = time.monotonic() + 30
    while not jobd.get(job_id)["status"].get("retry_at"):  # failed once, waits 30 s
        assert time.monotonic() < deadline, "the first run did not fail in time"
        time.sleep(0.2)
    pending = jobd.get(job_id)["status"]
    assert pending["phase"] == "Pending" and pending["attempts"][0]["exit_code"] == 1
    assert "run again in 30 s" in jobd.ok("status")  # what it waits for
    jobd.ok("cancel", job_id)
    final = jobd.wait_phase(job_id, "Cancelled", timeout=10)
    assert final["status"]["retries"] == 1 and len(final["status"]["attempts"]) == 1
