"""examples/train_torch.py against real SIGTERMs: preempted three times in a row with a grace
of 1 s, each run resumed from the last, it ends bit-identical to a run never interrupted; a
SIGTERM during `import torch` and a RESUME_FROM holding nothing still lead to that same end.

Runs where torch is installed (`make torch`, which .ci/run does); jobd's own test
dependencies leave it out, so elsewhere the torch tests skip, saying so, except under
CI=true, where they fail (tests/conftest.py `require_torch`). What the example
says when numpy or torch is missing is tested everywhere.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from jobd.worker.checkpoints import ensure_checkpoint_dir, find_resume_target
from tests.conftest import require_torch

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "examples" / "train_torch.py"
SENTINEL = b"jobd-checkpoint-complete"
GRACE_S = 1.0


def _env(ckpt_dir: Path, step_sleep: str, resume_from: Path | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "RESUME_FROM"}
    env.update(
        PYTHONPATH=str(REPO),
        JOBD_CHECKPOINT_DIR=str(ckpt_dir),
        JOBD_CHECKPOINT_GRACE_S=str(GRACE_S),
        TRAIN_STEP_SLEEP=step_sleep,
    )
    if resume_from is not None:
        env["RESUME_FROM"] = str(resume_from)
    return env


def _run_to_end(env: dict[str, str]) -> tuple[dict[str, Any], str, str]:
    done = subprocess.run(
        [sys.executable, str(SCRIPT)], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    line = next(ln for ln in done.stdout.splitlines() if ln.startswith("RESULT "))
    return json.loads(line.removeprefix("RESULT ")), done.stdout, done.stderr


def _start_step(stdout: str) -> int:
    return int(next(ln for ln in stdout.splitlines() if ln.startswith("start step=")).split("=")[1])


def _handles_sigterm(pid: int) -> bool:
    """Whether the process has a SIGTERM handler installed (SigCgt in /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (signal.SIGTERM - 1) & 1)
    return False


def _terminate(proc: subprocess.Popen[bytes]) -> tuple[bytes, bytes, float]:
    """SIGTERM, then the output and how long the exit took."""
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    return out, err, time.monotonic() - sent


def _preempt_mid_run(env: dict[str, str]) -> float:
    """Run until it has logged progress, SIGTERM it; the seconds its checkpoint took."""
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPT)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith(b"step="):
            break
    out, err, took = _terminate(proc)
    assert proc.returncode == 0, err.decode()
    assert out.splitlines()[-1] == SENTINEL and b"RESULT" not in out
    return took


def _preempt_while_importing(env: dict[str, str]) -> bytes:
    """SIGTERM as soon as the handler is in place: `import torch` is still under way."""
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPT)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    deadline = time.monotonic() + 10
    while not _handles_sigterm(proc.pid):
        assert time.monotonic() < deadline, "no SIGTERM handler after 10 s"
        time.sleep(0.002)
    out, err, _took = _terminate(proc)
    assert proc.returncode == 0, err.decode()
    assert out.splitlines() == [SENTINEL]  # not a single step was taken
    return err


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    require_torch()
    root = tmp_path_factory.mktemp("torch-baseline")
    result, _out, _err = _run_to_end(_env(ensure_checkpoint_dir(root, 1), step_sleep="0"))
    return result


def test_three_preemptions_in_a_row_end_bit_identical(
    baseline: dict[str, Any], tmp_path: Path
) -> None:
    resume_from: Path | None = None
    for job_id in (1, 2, 3):
        ckpt_dir = ensure_checkpoint_dir(tmp_path, job_id)
        took = _preempt_mid_run(_env(ckpt_dir, "0.001", resume_from))
        assert took < GRACE_S, f"the checkpoint took {took:.3f} s of a {GRACE_S} s grace"
        resume_from = find_resume_target(ckpt_dir)
        assert resume_from == ckpt_dir / "latest.pt"

    resumed, stdout, _err = _run_to_end(_env(ensure_checkpoint_dir(tmp_path, 4), "0", resume_from))
    assert 0 < _start_step(stdout) < baseline["steps"]  # it really continued from the middle
    assert resumed["weights_sha256"] == baseline["weights_sha256"]
    assert resumed == baseline


def test_a_sigterm_during_import_leaves_the_point_it_started_from(
    baseline: dict[str, Any], tmp_path: Path
) -> None:
    # A fresh run: nothing to save, and a resume from its (empty) directory starts over.
    fresh_dir = ensure_checkpoint_dir(tmp_path, 1)
    err = _preempt_while_importing(_env(fresh_dir, "0.001"))
    assert b"nothing to save" in err and not list(fresh_dir.iterdir())
    redone, stdout, err_text = _run_to_end(_env(ensure_checkpoint_dir(tmp_path, 2), "0", fresh_dir))
    assert _start_step(stdout) == 0 and "holds no checkpoint" in err_text
    assert redone == baseline

    # A resumed run: its own directory gets the checkpoint it started from.
    mid_dir = ensure_checkpoint_dir(tmp_path, 3)
    _preempt_mid_run(_env(mid_dir, "0.001"))
    again_dir = ensure_checkpoint_dir(tmp_path, 4)
    _preempt_while_importing(_env(again_dir, "0.001", mid_dir / "latest.pt"))
    assert find_resume_target(again_dir) == again_dir / "latest.pt"
    assert (again_dir / "latest.pt").read_bytes() == (mid_dir / "latest.pt").read_bytes()
    finished, stdout, _err = _run_to_end(_env(ensure_checkpoint_dir(tmp_path, 5), "0", again_dir))
    assert _start_step(stdout) > 0
    assert finished == baseline


def test_resume_from_nothing_starts_fresh_and_says_so(
    baseline: dict[str, Any], tmp_path: Path
) -> None:
    missing = tmp_path / "never-written" / "latest.pt"
    result, stdout, err = _run_to_end(_env(ensure_checkpoint_dir(tmp_path, 1), "0", missing))
    assert _start_step(stdout) == 0
    assert f"RESUME_FROM={missing} holds no checkpoint (latest.pt): starting fresh" in err
    assert result == baseline


def test_a_missing_module_is_named_before_any_training(tmp_path: Path) -> None:
    """Without numpy the example used to train 4,000 steps and then die; now it says so first."""
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "numpy.py").write_text("raise ImportError('No module named numpy')\n")
    env = _env(ensure_checkpoint_dir(tmp_path, 1), "0")
    env["PYTHONPATH"] = f"{shadow}{os.pathsep}{REPO}"
    done = subprocess.run(
        [sys.executable, str(SCRIPT)], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert "needs numpy" in done.stderr and "examples/requirements.txt" in done.stderr
    assert "start step" not in done.stdout
