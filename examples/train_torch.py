"""A PyTorch training job that checkpoints when jobd preempts it (the PyTorch twin of
train_numpy.py).

Needs torch and numpy, which jobd itself does not depend on: ``pip install -r
examples/requirements.txt`` (or ``pip install 'jobd[examples]'``) in the environment the job
runs in. Started without them, it says so and exits 2 before training anything.

On SIGTERM the preemption handler saves model, optimizer, step and RNG state to
``$JOBD_CHECKPOINT_DIR/latest.pt``; a later run with ``RESUME_FROM`` pointing at that file (or
its directory) continues from the saved step, and ends with exactly the weights of a run that
was never interrupted.

Unlike the NumPy example, an optimizer step here updates parameters in place across many
bytecodes, so a handler that ran in the middle of one would save half-updated weights. Training
therefore runs on a background thread; the handler (on the main thread) asks it to stop at the
next step boundary (a few milliseconds away), waits for that, and only then saves. Saving this
model takes milliseconds too, so any grace of 1 s or more is enough.

The handler is installed first, before ``import torch`` (seconds on a cold cache). A SIGTERM
that arrives before the model exists has nothing new to save: the run's state is still the one
it started from, so the handler carries that over (the ``RESUME_FROM`` checkpoint, linked into
this run's directory, or nothing for a run that started fresh) and reports the checkpoint
complete. A ``RESUME_FROM`` that holds no checkpoint (an empty directory, a missing file) starts
a fresh run from step 0 and says so on stderr.

Environment:
    JOBD_CHECKPOINT_DIR  where checkpoints and result.json go (default ./checkpoints)
    RESUME_FROM          a latest.pt file, or a directory holding one, to resume from
    TRAIN_STEP_SLEEP     seconds to sleep after each step (default 0.001)
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from jobd.client import install_preemption_handler

SEED = 1234
N_SAMPLES = 4096
N_FEATURES = 16
HIDDEN = 64
BATCH_SIZE = 64
LEARNING_RATE = 0.01
TOTAL_STEPS = 4000
LOG_EVERY = 500
CHECKPOINT_NAME = "latest.pt"
REQUIRED = ("numpy", "torch")  # numpy: torch's .numpy(), used for the weights' digest
EXIT_MISSING_MODULES = 2


def atomic_save(obj: Any, path: Path, save: Any) -> None:
    """Save via a temp file in the same directory, fsync, then rename over ``path``."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def say(text: str) -> None:
    """A line on stderr, by one raw write: safe even from inside the SIGTERM handler."""
    os.write(2, (text + "\n").encode())


def resume_point(resume_from: str | None) -> Path | None:
    """The checkpoint file RESUME_FROM names (a file, or a directory holding one), if any."""
    if not resume_from:
        return None
    path = Path(resume_from)
    found = path / CHECKPOINT_NAME if path.is_dir() else path
    if found.is_file():
        return found
    say(f"RESUME_FROM={resume_from} holds no checkpoint ({CHECKPOINT_NAME}): starting fresh")
    return None


def carry_over(start: Path | None, ckpt_dir: Path) -> None:
    """Make ``start`` (the point this run began from) this run's checkpoint too."""
    if start is None:
        say("SIGTERM before training began: nothing to save; a resume starts from step 0")
        return
    target = ckpt_dir / CHECKPOINT_NAME
    try:
        os.link(start, target)  # instant, however large the checkpoint
    except OSError:
        atomic_save(start, target, lambda src, f: f.write(src.read_bytes()))
    say(f"SIGTERM before training began: {start} carried over as {target}")


def missing_modules() -> list[str]:
    missing = []
    for name in REQUIRED:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    return missing


def main() -> int:
    ckpt_dir = Path(os.environ.get("JOBD_CHECKPOINT_DIR", "checkpoints"))
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    start = resume_point(os.environ.get("RESUME_FROM"))
    # First, before anything slow: a preemption from here on is always a clean one.
    install_preemption_handler(lambda _remaining: carry_over(start, ckpt_dir))
    missing = missing_modules()
    if missing:
        say(
            f"train_torch.py needs {' and '.join(missing)}, not installed here: "
            "pip install -r examples/requirements.txt (or 'jobd[examples]')"
        )
        return EXIT_MISSING_MODULES
    return train(ckpt_dir, start)


def train(ckpt_dir: Path, start: Path | None) -> int:
    import torch

    step_sleep = float(os.environ.get("TRAIN_STEP_SLEEP", "0.001"))
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

    data_gen = torch.Generator().manual_seed(SEED)
    features = torch.randn(N_SAMPLES, N_FEATURES, generator=data_gen)
    targets = torch.sin(features.sum(dim=1, keepdim=True)) + 0.05 * torch.randn(
        N_SAMPLES, 1, generator=data_gen
    )
    features, targets = features.to(device), targets.to(device)

    torch.manual_seed(SEED)
    model = torch.nn.Sequential(
        torch.nn.Linear(N_FEATURES, HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, 1)
    ).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE, momentum=0.9)
    batch_gen = torch.Generator().manual_seed(SEED + 1)
    progress = {"step": 0}

    if start is not None:
        # CPU first: the RNG state must stay a CPU tensor; load_state_dict moves the rest.
        state = torch.load(start, map_location="cpu")
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        batch_gen.set_state(state["batch_rng"])
        progress["step"] = int(state["step"])
    print(f"start step={progress['step']}", flush=True)

    stop = threading.Event()
    at_rest = threading.Event()  # set once the training thread will touch nothing more

    def run_steps() -> None:
        try:
            for step in range(progress["step"], TOTAL_STEPS):
                if stop.is_set():
                    return
                batch = torch.randint(0, N_SAMPLES, (BATCH_SIZE,), generator=batch_gen)
                loss = torch.nn.functional.mse_loss(model(features[batch]), targets[batch])
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                progress["step"] = step + 1
                if (step + 1) % LOG_EVERY == 0:
                    print(f"step={step + 1} loss={loss.item():.6f}", flush=True)
                if step_sleep > 0:
                    time.sleep(step_sleep)
        finally:
            at_rest.set()

    def checkpoint(time_remaining: float) -> None:
        stop.set()
        # A step takes milliseconds and so does the save: half the grace is ample for the
        # wait and leaves the other half for the save, even with a grace of 1 s.
        if not at_rest.wait(timeout=time_remaining / 2):
            raise TimeoutError("training step did not reach a boundary within the grace window")
        state = {
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "batch_rng": batch_gen.get_state(),
            "step": progress["step"],
        }
        atomic_save(state, ckpt_dir / CHECKPOINT_NAME, torch.save)

    trainer = threading.Thread(target=run_steps, name="train", daemon=True)
    trainer.start()
    # Replaces carry_over only after start(): before it, at_rest could never be set and a
    # SIGTERM would time out. Until then, carry_over still holds (the state a resume needs).
    install_preemption_handler(checkpoint)
    # Short joins keep the main thread returning to the interpreter, where signals are handled.
    while trainer.is_alive():
        trainer.join(timeout=0.5)

    with torch.no_grad():
        final_loss = torch.nn.functional.mse_loss(model(features), targets).item()
    digest = hashlib.sha256()
    for tensor in model.state_dict().values():
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    result = {"final_loss": final_loss, "weights_sha256": digest.hexdigest(), "steps": TOTAL_STEPS}
    line = json.dumps(result, sort_keys=True)
    (ckpt_dir / "result.json").write_text(line + "\n")
    print(f"final_loss={final_loss!r}")
    print(f"RESULT {line}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
