"""A PyTorch training job that checkpoints when jobd preempts it (the PyTorch twin of
train_numpy.py; needs torch, which jobd itself does not depend on).

On SIGTERM the preemption handler saves model, optimizer, step and RNG state to
``$JOBD_CHECKPOINT_DIR/latest.pt``; a later run with ``RESUME_FROM`` pointing at that file (or
its directory) continues from the saved step.

Unlike the NumPy example, an optimizer step here updates parameters in place across many
bytecodes, so a handler that ran in the middle of one would save half-updated weights. Training
therefore runs on a background thread; the handler (on the main thread) asks it to stop at the
next step boundary, waits for that, and only then saves.

Environment:
    JOBD_CHECKPOINT_DIR  where checkpoints and result.json go (default ./checkpoints)
    RESUME_FROM          a latest.pt file, or a directory holding one, to resume from
    TRAIN_STEP_SLEEP     seconds to sleep after each step (default 0.001)
"""

from __future__ import annotations

import hashlib
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
SAVE_MARGIN_S = 2.0  # time kept back from the grace window for torch.save itself


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


def main() -> int:
    import torch  # imported here so the module stays importable (and lintable) without torch

    ckpt_dir = Path(os.environ.get("JOBD_CHECKPOINT_DIR", "checkpoints"))
    ckpt_dir.mkdir(parents=True, exist_ok=True)
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

    resume_from = os.environ.get("RESUME_FROM")
    if resume_from:
        path = Path(resume_from)
        # CPU first: the RNG state must stay a CPU tensor; load_state_dict moves the rest.
        state = torch.load(path / "latest.pt" if path.is_dir() else path, map_location="cpu")
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        batch_gen.set_state(state["batch_rng"])
        progress["step"] = int(state["step"])
    print(f"start step={progress['step']}", flush=True)

    stop = threading.Event()
    at_rest = threading.Event()  # set once the training thread will touch nothing more

    def train() -> None:
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
        if not at_rest.wait(timeout=max(0.0, time_remaining - SAVE_MARGIN_S)):
            raise TimeoutError("training step did not reach a boundary within the grace window")
        state = {
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "batch_rng": batch_gen.get_state(),
            "step": progress["step"],
        }
        atomic_save(state, ckpt_dir / "latest.pt", torch.save)

    trainer = threading.Thread(target=train, name="train", daemon=True)
    trainer.start()
    # Installed after start(): before it, at_rest could never be set and a SIGTERM would time out.
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
