"""The state directories of attempts that are over are removed on a thread of their own
(worker/removal.py): queued without waiting, all gone once `finish` returns, a missing
one passed over, and the thread started only when there is something to remove."""

from __future__ import annotations

import threading
from pathlib import Path

from jobd.worker.removal import Removals


def _state_dir(root: Path, name: str) -> Path:
    path = root / name
    path.mkdir()
    for file in ("agent.json", "launch.json", "output.log", "status.json"):
        (path / file).write_text("{}")
    return path


def test_queued_directories_are_gone_once_finished(tmp_path: Path) -> None:
    removals = Removals()
    dirs = [_state_dir(tmp_path, f"7-{attempt}") for attempt in range(5)]
    for path in [*dirs, tmp_path / "never-made"]:
        removals.remove(path)
    thread = removals._thread
    removals.finish()
    assert list(tmp_path.iterdir()) == []
    assert thread is not None and not thread.is_alive()


def test_no_thread_until_there_is_something_to_remove(tmp_path: Path) -> None:
    removals = Removals()
    before = set(threading.enumerate())
    removals.finish()
    assert removals._thread is None and set(threading.enumerate()) <= before
    removals.remove(_state_dir(tmp_path, "8-0"))  # usable again after finish
    removals.finish()
    assert list(tmp_path.iterdir()) == []
