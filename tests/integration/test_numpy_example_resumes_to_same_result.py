"""Path B end to end with a real workload: train, get preempted by SIGTERM mid-way, resume from
the checkpoint in a fresh directory, and finish with exactly the uninterrupted weights."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from jobd.worker.checkpoints import ensure_checkpoint_dir, find_resume_target

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "examples" / "train_numpy.py"
SENTINEL = b"jobd-checkpoint-complete"
TOTAL_STEPS = 4000


def _env(ckpt_dir: Path, step_sleep: str, resume_from: Path | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "RESUME_FROM"}
    env.update(
        PYTHONPATH=str(REPO),
        JOBD_CHECKPOINT_DIR=str(ckpt_dir),
        JOBD_CHECKPOINT_GRACE_S="10",
        TRAIN_STEP_SLEEP=step_sleep,
    )
    if resume_from is not None:
        env["RESUME_FROM"] = str(resume_from)
    return env


def _run_to_end(env: dict[str, str]) -> tuple[dict[str, Any], bytes]:
    done = subprocess.run(
        [sys.executable, str(SCRIPT)], cwd=REPO, env=env, capture_output=True, timeout=60
    )
    assert done.returncode == 0, done.stderr.decode()
    line = next(ln for ln in done.stdout.splitlines() if ln.startswith(b"RESULT "))
    result: dict[str, Any] = json.loads(line[len(b"RESULT ") :])
    on_disk = json.loads((Path(env["JOBD_CHECKPOINT_DIR"]) / "result.json").read_text())
    assert on_disk == result
    return result, done.stdout


def _run_and_preempt(env: dict[str, str]) -> bytes:
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPT)],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith(b"step="):
                break  # some progress is on record: preempt now, mid-run
        proc.send_signal(signal.SIGTERM)
        rest, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0, err.decode()
    assert SENTINEL in rest
    assert b"RESULT" not in rest
    return rest


def test_preempted_and_resumed_run_matches_uninterrupted(tmp_path: Path) -> None:
    root = tmp_path / "checkpoints"
    baseline, _ = _run_to_end(_env(ensure_checkpoint_dir(root, 1), step_sleep="0"))
    assert baseline["steps"] == TOTAL_STEPS

    preempted_dir = ensure_checkpoint_dir(root, 2)
    _run_and_preempt(_env(preempted_dir, step_sleep="0.001"))
    checkpoint = find_resume_target(preempted_dir)
    assert checkpoint == preempted_dir / "latest.npz"
    assert not (preempted_dir / "result.json").exists()

    resumed, stdout = _run_to_end(
        _env(ensure_checkpoint_dir(root, 3), step_sleep="0", resume_from=checkpoint)
    )
    start_step = int(stdout.splitlines()[0].split(b"=")[1])
    assert 0 < start_step < TOTAL_STEPS  # it really continued from the middle
    assert resumed == baseline
    assert resumed["weights_sha256"] == baseline["weights_sha256"]

    # RESUME_FROM may also name the directory holding latest.npz.
    from_dir, _ = _run_to_end(
        _env(ensure_checkpoint_dir(root, 4), step_sleep="0", resume_from=preempted_dir)
    )
    assert from_dir == baseline
