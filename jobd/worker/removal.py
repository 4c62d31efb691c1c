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

import contextlib
import os
import queue
import shutil
import threading
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
    (started at the first)."""

    def __init__(self) -> None:
        self._paths: queue.SimpleQueue[Path | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    def remove(self, path: Path) -> None:
        """Queue `path` for removal; returns at once."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="removals", daemon=True)
            self._thread.start()
        self._paths.put(path)

    def _run(self) -> None:
        while (path := self._paths.get()) is not None:
            with contextlib.suppress(OSError):
                remove_flat_dir(path)

    def finish(self, timeout_s: float = 5.0) -> None:
        """Remove what is queued, waiting at most timeout_s; then the thread ends."""
        thread, self._thread = self._thread, None
        if thread is not None:
            self._paths.put(None)
            thread.join(timeout_s)
