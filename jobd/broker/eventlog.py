"""events.jsonl: the broker's greppable copy of the events table (CONTRACT.md §7).

The store commits an event together with the change that justifies it; EventLog appends
the line only after that commit, from a store listener (see wiring.py). The table is the
record; the file is derived from it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from jobd.store.base import Change, EventRecord

__all__ = ["EventLog"]


class EventLog:
    """Appends committed events to `<log dir>/events.jsonl`, one JSON object a line."""

    def __init__(self, log_dir: Path) -> None:
        log_dir.mkdir(parents=True, exist_ok=True)
        self.path = log_dir / "events.jsonl"
        self._file: TextIO = self.path.open("a", buffering=1, encoding="utf-8")

    def on_commit(self, _changes: Sequence[Change], events: Sequence[EventRecord]) -> None:
        if events:
            lines = "".join(ev.line() + "\n" for ev in events)
            # The store already holds these durably; the file is a derived, greppable copy.
            self._file.write(lines)
            self._file.flush()

    def close(self) -> None:
        self._file.close()
