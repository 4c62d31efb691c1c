"""Who this agent is: its worker's name plus an instance id kept in its state directory.

The instance id is made once (`<state dir>/instance-id`, 0600) and read at every start
after, so an agent restarted on its state directory is the same instance and takes its
lease back at once, while a second agent given the same `--name` elsewhere (a copied unit
file) is another instance, which the broker refuses while the first holds the lease
(controllers/verbs/lease_holder.py).

Two agents on one state directory would fight over its files: each agent holds an
exclusive flock on `<state dir>/agent.lock` for its whole life, and a second one refuses
to start. The lock's descriptor is close-on-exec, so no supervisor or workload it starts
keeps the lock after the agent is gone.
"""

from __future__ import annotations

import fcntl
import os
import re
import uuid
from dataclasses import dataclass
from pathlib import Path

__all__ = ["INSTANCE_FILE", "LOCK_FILE", "Identity", "Refused", "claim_state_dir"]

INSTANCE_FILE = "instance-id"
LOCK_FILE = "agent.lock"
_INSTANCE = re.compile(r"[A-Za-z0-9_-]{1,64}")  # wire.models.Instance


class Refused(Exception):
    """This agent may not run as its worker: one sentence for the operator, exit 1."""


@dataclass
class Identity:
    instance: str
    lock_fd: int  # held for the agent's life: the flock on the state directory

    def release(self) -> None:
        os.close(self.lock_fd)


def claim_state_dir(state_dir: Path) -> Identity:
    """Lock the state directory for this agent and read (or make) its instance id."""
    state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(state_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 32).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise Refused(
            f"the state directory {state_dir} is in use by another jobd agent (pid {holder}); "
            "stop it, or give this one its own --state-dir"
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    try:
        return Identity(_instance_id(state_dir), fd)
    except BaseException:
        os.close(fd)
        raise


def _instance_id(state_dir: Path) -> str:
    """The id kept in the state directory; made (and made durable) the first time."""
    path = state_dir / INSTANCE_FILE
    try:
        kept = path.read_text().strip()
    except FileNotFoundError:
        kept = ""
    if _INSTANCE.fullmatch(kept):
        return kept
    made = uuid.uuid4().hex
    temporary = path.with_name(f".{INSTANCE_FILE}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, f"{made}\n".encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temporary, path)  # under the lock: no other agent writes it meanwhile
    return made
