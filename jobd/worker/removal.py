"""The state directories of attempts that are over, removed on a thread of their own.

An attempt's last step (hooks/ending.py `Tidy`) removes its state directory: a handful
of files. The unlinks cost little CPU (~0.1 ms) but on a busy disk each waits on the
file system's journal: 3 ms a directory measured on the shared machine, the agent's
whole event loop stopped meanwhile, a third of a drain's wall time in the agent. So the
directories are handed to one thread that removes them in order; the loop only queues
a path. Nothing waits for a removal: a later attempt of the same job has a directory of
its own. The agent lets the queue empty, for a few seconds at most, when it stops
(`finish`); a directory still there is taken back at the next start, which carries out
its attempt's last steps again, as after an agent killed in the middle of a removal
(agent.py `_readopt`).
Next stage: none.
"""

from __future__ import annotations

import collections
import contextlib
import os
import queue
import shutil
import threading
import time
from pathlib import Path

__all__ = ["Removals", "remove_flat_dir"]


def remove_flat_dir(path: Path) -> None:
    """Remove a job's state directory: a handful of files, no subdirectories (the shim
    makes none)."""
    try:
        names = os.listdir(path)
    except FileNotFoundError:
        return
    for name in names:
        try:
            os.unlink(path / name)
        except IsADirectoryError:
            shutil.rmtree(path / name, ignore_errors=True)
        except FileNotFoundError:
            pass
    with contextlib.suppress(OSError):
        os.rmdir(path)


class Removals:
    """Removes the directories it is given, one after the other, on its own thread
    (started at the first).

    Waking a thread costs the loop more than queueing (a futex, then the GIL handed back
    and forth: 0.36 ms of wall time a put in a profiled drain), so the thread is woken only
    when it sleeps, and once woken lingers LINGER_S to take a drain's directories in a
    batch."""

    LINGER_S = 0.02

    def __init__(self) -> None:
        self._paths: collections.deque[Path] = collections.deque()
        self._wake: queue.SimpleQueue[None] = queue.SimpleQueue()
        self._asleep = True
        self._stopping = False
        self._thread: threading.Thread | None = None

    def remove(self, path: Path) -> None:
        """Queue `path` for removal; returns at once."""
        if self._thread is None:
            self._stopping = False
            self._thread = threading.Thread(target=self._run, name="removals", daemon=True)
            self._thread.start()
        self._paths.append(path)
        if self._asleep:
            self._asleep = False
            self._wake.put(None)

    def _run(self) -> None:
        while not self._stopping:
            self._wake.get()
            time.sleep(0 if self._stopping else self.LINGER_S)
            self._remove_queued()

    def _remove_queued(self) -> None:
        while True:
            while self._paths:
                with contextlib.suppress(OSError):
                    remove_flat_dir(self._paths.popleft())
            self._asleep = True
            if not self._paths:  # else queued after the last look and before the flag
                return
            self._asleep = False

    def finish(self, timeout_s: float = 5.0) -> None:
        """Remove what is queued, waiting at most timeout_s; then the thread ends."""
        thread, self._thread = self._thread, None
        if thread is not None:
            self._stopping = True
            self._wake.put(None)
            thread.join(timeout_s)
