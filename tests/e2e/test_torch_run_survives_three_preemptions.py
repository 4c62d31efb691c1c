"""A PyTorch run through `jobd dev`, preempted three times in a row with a grace of 1 s and
each time resumed by `auto_resume`, ends bit-identical to a run never interrupted; so does
one the sweeper preempts for a higher-priority job and `job resume` continues by hand.

Runs where torch is installed (`make torch`, which .ci/run does); elsewhere it skips,
saying so, except under CI=true, where it fails (tests/conftest.py `require_torch`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.conftest import require_torch
from tests.e2e.harness import REPO, Jobd, manifest, start_jobd, stop_jobd

require_torch()

TRAIN = [sys.executable, str(REPO / "examples" / "train_torch.py")]


def _uninterrupted(tmp: Path) -> dict[str, Any]:
    env = dict(os.environ, JOBD_CHECKPOINT_DIR=str(tmp), TRAIN_STEP_SLEEP="0")
    env.pop("RESUME_FROM", None)
    done = subprocess.run(TRAIN, env=env, capture_output=True, text=True, check=True, timeout=120)
    line = next(x for x in done.stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line.removeprefix("RESULT "))  # type: ignore[no-any-return]


def _wait_for_progress(jobd: Jobd, job_id: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while "step=" not in jobd.job("logs", str(job_id)).stdout:
        assert time.monotonic() < deadline, f"job {job_id} logged no step in {timeout} s"
        time.sleep(0.1)


def test_auto_resume_three_times_ends_bit_identical(jobd: Jobd, tmp_path: Path) -> None:
    doc = manifest(
        "torch",
        TRAIN,
        auto_resume=True,
        preemptible=True,
        checkpoint_grace_s=1,
        env={"TRAIN_STEP_SLEEP": "0.002"},
    )
    jobd.ok("apply", "-f", "-", input=doc)
    name = "torch"
    for round_ in (1, 2, 3):
        job_id = jobd.wait_phase(name, "Running", timeout=60)["metadata"]["id"]
        _wait_for_progress(jobd, job_id)
        jobd.ok("preempt", str(job_id))
        assert jobd.wait_phase(job_id, "Preempted")["status"]["preemption"]["checkpoint_complete"]
        assert len(jobd.events(event="checkpoint_complete", job=job_id)) == 1
        name = f"torch-r{round_}"

    last = jobd.wait_phase(name, "Succeeded", "Failed", timeout=120)
    last_id = last["metadata"]["id"]
    assert last["status"]["phase"] == "Succeeded", jobd.job("logs", str(last_id)).stdout
    logs = jobd.ok("logs", str(last_id))
    start = int(next(x for x in logs.splitlines() if x.startswith("start step=")).split("=")[1])
    assert start > 0  # it continued from the third checkpoint
    result = json.loads((jobd.root / "ckpt" / str(last_id) / "result.json").read_text())
    assert result == _uninterrupted(tmp_path)


def test_preempted_by_the_sweeper_and_resumed_by_hand_ends_bit_identical(tmp_path: Path) -> None:
    fast = ["--auto-preempt-queued", "1", "--auto-preempt-min-runtime", "1"]
    (tmp_path / "dev").mkdir()
    jobd = start_jobd(tmp_path / "dev", "--slots", "1", *fast)
    try:
        doc = manifest(
            "torch",
            TRAIN,
            priority=10,
            preemptible=True,
            checkpoint_grace_s=1,
            env={"TRAIN_STEP_SLEEP": "0.002"},
        )
        jobd.ok("apply", "-f", "-", input=doc)
        victim = jobd.wait_phase("torch", "Running", timeout=60)["metadata"]["id"]
        _wait_for_progress(jobd, victim)
        urgent = jobd.ok("submit", "--priority", "60", "--", sys.executable, "-c", "pass")
        preemption = jobd.wait_phase(victim, "Preempted", timeout=60)["status"]["preemption"]
        assert (preemption["reason"], preemption["candidate_job"]) == ("sweeper", int(urgent))
        assert preemption["checkpoint_complete"] is True
        jobd.wait_phase(int(urgent), "Succeeded")

        resumed = int(jobd.ok("resume", str(victim)))
        done = jobd.wait_phase(resumed, "Succeeded", "Failed", timeout=120)
        assert done["status"]["phase"] == "Succeeded", jobd.job("logs", str(resumed)).stdout
        result = json.loads((jobd.root / "ckpt" / str(resumed) / "result.json").read_text())
        assert result == _uninterrupted(tmp_path / "baseline")
    finally:
        stop_jobd(jobd)
