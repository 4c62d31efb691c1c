"""A small, real training job that survives preemption: linear regression by minibatch SGD.

It shows the jobd checkpoint protocol end to end. On SIGTERM the preemption handler saves the
weights, the step and the RNG state to ``$JOBD_CHECKPOINT_DIR/latest.npz``; a later run started
with ``RESUME_FROM`` pointing at that file (or its directory) carries on from the saved step.
Because the RNG state travels with the weights, an interrupted-then-resumed run ends with
exactly the same weights as an uninterrupted one.

Environment:
    JOBD_CHECKPOINT_DIR  where checkpoints and result.json go (default ./checkpoints)
    RESUME_FROM          a latest.npz file, or a directory holding one, to resume from
    TRAIN_STEP_SLEEP     seconds to sleep after each step (default 0.001), to make it preemptible
    TRAIN_LOG_EVERY      print the loss every this many steps (default 500)
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from jobd.client import install_preemption_handler, report_progress

DATA_SEED = 1234
TRAIN_SEED = 5678
N_SAMPLES = 2048
N_FEATURES = 16
BATCH_SIZE = 32
LEARNING_RATE = 0.01
TOTAL_STEPS = 4000
LOG_EVERY = 500


@dataclass(frozen=True)
class Snapshot:
    """Everything needed to continue training, as of the end of a step."""

    step: int
    weights: np.ndarray
    rng_state: dict[str, Any]


class Trainer:
    def __init__(self, snapshot: Snapshot) -> None:
        # The SIGTERM handler may run between any two bytecodes of the loop, so the loop only
        # ever publishes a finished step by replacing this one attribute.
        self.snapshot = snapshot

    def run(
        self, features: np.ndarray, targets: np.ndarray, step_sleep: float, log_every: int
    ) -> np.ndarray:
        snap = self.snapshot
        rng = np.random.default_rng()
        rng.bit_generator.state = snap.rng_state
        weights = snap.weights
        for step in range(snap.step, TOTAL_STEPS):
            batch = rng.integers(0, len(targets), size=BATCH_SIZE)
            x, y = features[batch], targets[batch]
            grad = 2.0 * x.T @ (x @ weights - y) / BATCH_SIZE
            weights = weights - LEARNING_RATE * grad  # a new array: published snapshots stay put
            self.snapshot = Snapshot(step + 1, weights, rng.bit_generator.state)
            if (step + 1) % log_every == 0:
                loss = mse(features, targets, weights)
                print(f"step={step + 1} loss={loss:.6f}", flush=True)
                report_progress(step + 1, TOTAL_STEPS, loss=float(loss))  # job get: PROGRESS
            if step_sleep > 0:
                time.sleep(step_sleep)
        return weights


def make_dataset() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(DATA_SEED)
    features = rng.normal(size=(N_SAMPLES, N_FEATURES))
    true_weights = rng.normal(size=N_FEATURES)
    targets = features @ true_weights + 0.1 * rng.normal(size=N_SAMPLES)
    return features, targets


def mse(features: np.ndarray, targets: np.ndarray, weights: np.ndarray) -> float:
    return float(np.mean((features @ weights - targets) ** 2))


def fresh_snapshot() -> Snapshot:
    rng = np.random.default_rng(TRAIN_SEED)
    return Snapshot(0, np.zeros(N_FEATURES), rng.bit_generator.state)


def load_snapshot(resume_from: str) -> Snapshot:
    path = Path(resume_from)
    if path.is_dir():
        path = path / "latest.npz"
    with np.load(path) as data:
        return Snapshot(
            step=int(data["step"]),
            weights=data["weights"].copy(),
            rng_state=json.loads(str(data["rng_state"])),
        )


def atomic_write(path: Path, write: Any) -> None:
    """Write via a temp file in the same directory, fsync, then rename over ``path``."""
    # The temp name does not start with "latest." so a crash mid-write leaves nothing that
    # could be mistaken for a checkpoint.
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)  # make the rename itself durable
    finally:
        os.close(dir_fd)


def save_snapshot(snapshot: Snapshot, path: Path) -> None:
    atomic_write(
        path,
        lambda f: np.savez(
            f,
            step=np.array(snapshot.step),
            weights=snapshot.weights,
            rng_state=np.array(json.dumps(snapshot.rng_state)),
        ),
    )


def main() -> int:
    ckpt_dir = Path(os.environ.get("JOBD_CHECKPOINT_DIR", "checkpoints"))
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    step_sleep = float(os.environ.get("TRAIN_STEP_SLEEP", "0.001"))
    log_every = max(1, int(os.environ.get("TRAIN_LOG_EVERY", str(LOG_EVERY))))
    resume_from = os.environ.get("RESUME_FROM")

    features, targets = make_dataset()
    snapshot = load_snapshot(resume_from) if resume_from else fresh_snapshot()
    print(f"start step={snapshot.step}", flush=True)
    trainer = Trainer(snapshot)

    def checkpoint(time_remaining: float) -> None:
        snap = trainer.snapshot
        save_snapshot(snap, ckpt_dir / "latest.npz")
        # stderr, because the interrupted loop may be halfway through a print to stdout.
        print(f"checkpointed step={snap.step} ({time_remaining:.1f}s to spare)", file=sys.stderr)

    install_preemption_handler(checkpoint)
    weights = trainer.run(features, targets, step_sleep, log_every)

    result = {
        "final_loss": mse(features, targets, weights),
        "weights_sha256": hashlib.sha256(weights.tobytes()).hexdigest(),
        "steps": TOTAL_STEPS,
    }
    line = json.dumps(result, sort_keys=True)
    atomic_write(ckpt_dir / "result.json", lambda f: f.write(line.encode() + b"\n"))
    print(f"final_loss={result['final_loss']!r}")
    print(f"RESULT {line}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
