"""Data-parallel training across hosts: the multi-host twin of train_torch.py, run by torchrun.

Run as a job of several nodes, one torchrun per member, which reads the gang from the
environment jobd gives every member (PET_NNODES, PET_NODE_RANK, PET_MASTER_ADDR,
PET_MASTER_PORT), so the command needs no host names::

    job submit --nodes 2 -- torchrun --nproc-per-node 1 examples/ddp_torch.py

(or `job apply -f examples/ddp_torch.yaml`). Every process holds the same model, trains on
its share of each batch (the gloo backend, on CPUs) and DistributedDataParallel averages
the gradients with an all-reduce every step. Data, initial weights and batches come from
fixed seeds and every process computes with one thread, so the weights at the end depend
only on the number of processes: 2 nodes of 1 process, 1 node of 2, or a run preempted
and resumed all end with the same bytes, whose sha256 each process prints last, in its
`RESULT {...}` line.

Preemption. jobd sends SIGTERM to every member at once; torchrun passes it on to its
processes. A process cannot stop alone: its peers would wait for it in the next
all-reduce. So before each step the processes all-reduce a "stop" flag, and all of them
stop before the same step as soon as any one was told to. Then, on each host, the process
of LOCAL_RANK 0 saves model, optimizer, step and batch RNG to
`$JOBD_CHECKPOINT_DIR/latest.pt` (every host the same state: the members share no disk)
and prints the sentinel (jobd.client prints it once per host); the others exit without a
word. A later run with RESUME_FROM set on every member continues from the saved step.
A process stopped by a peer before its own SIGTERM arrived waits for it (a gang is
preempted whole), and exits 1 if none comes within the grace.

Needs torch and numpy (``pip install -r examples/requirements.txt``); the handler is
installed before ``import torch``, as in train_torch.py, whose helpers this reuses.

Environment:
    JOBD_CHECKPOINT_DIR  where checkpoints and result.json go (default ./checkpoints)
    RESUME_FROM          a latest.pt file, or a directory holding one, to resume from
    TRAIN_STEPS          how many steps in all (default 2000)
    TRAIN_STEP_SLEEP     seconds to sleep after each step (default 0)
    TRAIN_LOG_EVERY      a `step=N loss=...` line every this many steps (default 500)
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

from train_torch import (
    CHECKPOINT_NAME,
    EXIT_MISSING_MODULES,
    atomic_save,
    carry_over,
    missing_modules,
    resume_point,
    say,
)

from jobd.client import install_preemption_handler, time_remaining

SEED = 1234
N_SAMPLES = 4096
N_FEATURES = 16
HIDDEN = 64
BATCH_SIZE = 64  # the global batch: each of N processes trains on every Nth sample of it
LEARNING_RATE = 0.01


def saves_for_host() -> bool:
    """Whether this process writes its host's checkpoint (torchrun's LOCAL_RANK 0)."""
    return os.environ.get("LOCAL_RANK", "0") in ("", "0")


def main() -> int:
    ckpt_dir = Path(os.environ.get("JOBD_CHECKPOINT_DIR", "checkpoints"))
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    start = resume_point(os.environ.get("RESUME_FROM"))
    # Before anything slow: a SIGTERM before training leaves the point this run began from.
    install_preemption_handler(
        lambda _remaining: carry_over(start, ckpt_dir) if saves_for_host() else None
    )
    missing = missing_modules()
    if missing:
        say(
            f"ddp_torch.py needs {' and '.join(missing)}, not installed here: "
            "pip install -r examples/requirements.txt (or 'jobd[examples]')"
        )
        return EXIT_MISSING_MODULES
    return Training(ckpt_dir, start).run()


class Training:
    """One process's share of the training, on a thread, and its stop at a step boundary."""

    def __init__(self, ckpt_dir: Path, start: Path | None) -> None:
        import torch
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel

        self.torch, self.dist, self.ckpt_dir = torch, dist, ckpt_dir
        torch.set_num_threads(1)  # sums in one order, whatever the host's cores
        dist.init_process_group("gloo")  # RANK, WORLD_SIZE, MASTER_*: torchrun's
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.total = int(os.environ.get("TRAIN_STEPS", "2000"))
        self.step_sleep = float(os.environ.get("TRAIN_STEP_SLEEP", "0"))
        self.log_every = int(os.environ.get("TRAIN_LOG_EVERY", "500"))
        data = torch.Generator().manual_seed(SEED)
        self.features = torch.randn(N_SAMPLES, N_FEATURES, generator=data)
        noise = 0.05 * torch.randn(N_SAMPLES, 1, generator=data)
        self.targets = torch.sin(self.features.sum(dim=1, keepdim=True)) + noise
        torch.manual_seed(SEED)
        self.model = torch.nn.Sequential(
            torch.nn.Linear(N_FEATURES, HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, 1)
        )
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=LEARNING_RATE, momentum=0.9)
        self.batches = torch.Generator().manual_seed(SEED + 1)
        self.step = 0
        if start is not None:
            self._load(start)
        self.ddp = DistributedDataParallel(self.model)
        self.stop = threading.Event()  # this process was told to stop (its SIGTERM)
        self.at_rest = threading.Event()  # the training thread will touch nothing more

    def _load(self, start: Path) -> None:
        state = self.torch.load(start, map_location="cpu")
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.batches.set_state(state["batch_rng"])
        self.step = int(state["step"])

    def run(self) -> int:
        master = os.environ.get("MASTER_ADDR", "-")
        print(f"start step={self.step} rank={self.rank} world={self.world} master={master}")
        sys.stdout.flush()
        trainer = threading.Thread(target=self._train, name="train", daemon=True)
        trainer.start()
        install_preemption_handler(self._checkpoint)  # carry_over holds until here
        while trainer.is_alive():  # short joins: the main thread keeps handling signals
            trainer.join(timeout=0.5)
        if self.step < self.total:  # a peer was told to stop: this member will be, too
            time.sleep(time_remaining() + 5)
            say("a peer stopped the training, and no SIGTERM came here: exiting")
            return 1
        self._report()
        # Every process here before any tears its connections down: a peer that closed them
        # while another still ended its last all-reduce made gloo abort that one (SIGABRT,
        # "terminate called without an active exception") after it had printed its RESULT.
        self.dist.barrier()
        self.dist.destroy_process_group()
        return 0

    def _train(self) -> None:
        torch = self.torch
        try:
            while self.step < self.total and not self._anyone_stopping():
                batch = torch.randint(0, N_SAMPLES, (BATCH_SIZE,), generator=self.batches)
                mine = batch[self.rank :: self.world]
                loss = torch.nn.functional.mse_loss(
                    self.ddp(self.features[mine]), self.targets[mine]
                )
                self.optimizer.zero_grad()
                loss.backward()  # DDP all-reduces (averages) the gradients here
                self.optimizer.step()
                self.step += 1
                if self.step % self.log_every == 0:
                    print(f"step={self.step} loss={loss.item():.6f}", flush=True)
                if self.step_sleep > 0:
                    time.sleep(self.step_sleep)
        finally:
            self.at_rest.set()

    def _anyone_stopping(self) -> bool:
        """Whether any process was told to stop: all of them stop before the same step."""
        flag = self.torch.tensor([1 if self.stop.is_set() else 0])
        self.dist.all_reduce(flag, op=self.dist.ReduceOp.MAX)
        return bool(flag.item())

    def _checkpoint(self, remaining: float) -> None:
        """The SIGTERM handler: stop at the next step boundary, then save this host's state."""
        self.stop.set()
        # Steps and the save take milliseconds: half the grace for the wait is ample.
        if not self.at_rest.wait(timeout=remaining / 2):
            raise TimeoutError("training did not reach a step boundary within the grace")
        if not saves_for_host():
            return
        state = {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "batch_rng": self.batches.get_state(),
            "step": self.step,
        }
        atomic_save(state, self.ckpt_dir / CHECKPOINT_NAME, self.torch.save)
        say(f"checkpoint at step {self.step} in {self.ckpt_dir / CHECKPOINT_NAME}")

    def _report(self) -> None:
        """The final weights' digest, the same in every process of every way of running."""
        with self.torch.no_grad():
            loss = self.torch.nn.functional.mse_loss(self.model(self.features), self.targets)
        digest = hashlib.sha256()
        for tensor in self.model.state_dict().values():
            digest.update(tensor.detach().contiguous().numpy().tobytes())
        result: dict[str, Any] = {
            "final_loss": loss.item(),
            "steps": self.total,
            "weights_sha256": digest.hexdigest(),
            "world_size": self.world,
        }
        line = json.dumps(result, sort_keys=True)
        if saves_for_host():
            (self.ckpt_dir / "result.json").write_text(line + "\n")
        print(f"RESULT {line}", flush=True)


if __name__ == "__main__":
    code = main()
    # Left without the interpreter's teardown: gloo's threads can abort it (SIGABRT,
    # "terminate called without an active exception") after the work and its RESULT are
    # done, which would fail a job that succeeded. Everything written is flushed first.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
