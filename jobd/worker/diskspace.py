"""The worker's disk: full or not, and which job's output filled it.

Every job's stdout and stderr are files in the worker's state directory, so one job that
prints without end fills the disk under all of them. The agent then fails that job alone,
saying so (`OutputDiskFull`, with its file), removes its files as for any ended job, and,
while the disk stays full, takes no new job: DiskWatch says why, on the heartbeat, and the
broker places nothing here until space is back (jobd.controllers.capacity).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import anyio

from jobd.logconfig import get_logger
from jobd.worker.shim.protocol import STDERR_FILE, STDOUT_FILE

__all__ = ["FULL_BELOW_BYTES", "DiskWatch", "disk_full", "filled_the_disk"]

log = get_logger()

# Below this much free space the disk is full: a job's next files (a launch's state
# directory, its status.json, the agent's record) may no longer fit.
FULL_BELOW_BYTES = 256 * 1024
# A job's output smaller than this filled nothing (some other writer did).
_FILLER_AT_LEAST_BYTES = 1024 * 1024


def free_bytes(path: Path) -> int | None:
    """Bytes free for an unprivileged writer on path's filesystem, or None if unknown."""
    try:
        found = os.statvfs(path)
    except OSError:
        return None
    return found.f_bavail * found.f_frsize


def disk_full(path: Path) -> str | None:
    """Why the disk under path counts as full, or None while it has room."""
    free = free_bytes(path)
    if free is None or free >= FULL_BELOW_BYTES:
        return None
    return f"the disk of the worker's state directory {path} is full ({free} bytes free)"


def _output_bytes(state_dir: Path) -> tuple[int, Path]:
    """Bytes a job's output holds on disk, and its larger file."""
    sizes = []
    for name in (STDOUT_FILE, STDERR_FILE):
        try:
            sizes.append((os.stat(state_dir / name).st_blocks * 512, state_dir / name))
        except OSError:
            sizes.append((0, state_dir / name))
    return sum(size for size, _ in sizes), max(sizes)[1]


def filled_the_disk(state_dir: Path) -> str | None:
    """Why the job in state_dir is to blame for a full disk, or None if it is not: the disk
    is full, and its output is the largest of every job's there (and no small one)."""
    if disk_full(state_dir) is None:
        return None
    held, largest_file = _output_bytes(state_dir)
    if held < _FILLER_AT_LEAST_BYTES:
        return None
    try:
        siblings = [entry for entry in state_dir.parent.iterdir() if entry != state_dir]
    except OSError:
        siblings = []
    if any(_output_bytes(other)[0] > held for other in siblings if other.is_dir()):
        return None
    free = free_bytes(state_dir) or 0
    return f"its output filled the worker's disk: {largest_file} ({held} bytes; {free} left)"


class DiskWatch:
    """Looks at the disk of the state directory every interval_s; `full` says why it is
    full while it is, and the heartbeat is sent at once when that changes."""

    def __init__(
        self, path: Path, while_full: Callable[[], None] = lambda: None, interval_s: float = 1.0
    ) -> None:
        # while_full: called at each look while the disk is full (to end a job filling it).
        self.path, self.while_full, self.interval_s = path, while_full, interval_s
        self.full: str | None = None  # why the disk is full, while it is
        self._changed: anyio.Event | None = None

    async def run(self) -> None:
        while True:
            self.check()
            await anyio.sleep(self.interval_s)

    async def changed_within(self, timeout_s: float) -> None:
        """Return after timeout_s, or as soon as the disk fills or has room again."""
        self._changed = anyio.Event()
        with anyio.move_on_after(timeout_s):
            await self._changed.wait()

    def check(self) -> None:
        full = disk_full(self.path)
        if full is not None:
            self.while_full()
        if (full is None) == (self.full is None):
            return
        self.full = full
        if full is not None:
            log.error("worker_disk_full", path=str(self.path), error=full)
        else:
            log.warning("worker_disk_recovered", path=str(self.path))
        if self._changed is not None:
            self._changed.set()
