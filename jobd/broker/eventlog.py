"""events.jsonl: the broker's greppable copy of the events table (CONTRACT.md §7).

The store commits an event together with the change that justifies it; EventLog appends
the line only after that commit, from a store listener (see wiring.py). The table is the
record; the file is derived from it, so a write that failed (a full disk, a closed file)
is made good from the table by `catch_up`, in order, before any later line.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from jobd.store.base import Change, EventRecord, Store

__all__ = ["EventLog"]


class EventLog:
    """Appends committed events to `<log dir>/events.jsonl`, one JSON object a line."""

    def __init__(self, log_dir: Path, store: Store) -> None:
        log_dir.mkdir(parents=True, exist_ok=True)
        self.path = log_dir / "events.jsonl"
        self.store = store
        self._file: TextIO = self._open()
        # The size after the last whole write: a line written in part is cut back to it.
        self._good_size = self._file.tell()
        # While lines are missing: the seq of the first event the file lacks.
        self._missing_from: int | None = None

    def _open(self) -> TextIO:
        return self.path.open("a", buffering=1, encoding="utf-8")

    def on_commit(self, _changes: Sequence[Change], events: Sequence[EventRecord]) -> None:
        if not events:
            return
        if self._missing_from is not None:
            self.catch_up()  # these are committed too: the table has them, in order
            return
        self._missing_from = events[0].seq
        self._append(events)
        self._missing_from = None

    def catch_up(self, page: int = 1000) -> None:
        """Append from the events table the lines this file missed, if any."""
        if self._missing_from is None:
            return
        self._reopen()
        while records := self.store.list_events(after_seq=self._missing_from - 1, limit=page):
            self._append(records)
            self._missing_from = records[-1].seq + 1
        self._missing_from = None

    def _append(self, events: Sequence[EventRecord]) -> None:
        # The store already holds these durably; the file is a derived, greppable copy.
        self._file.write("".join(ev.line() + "\n" for ev in events))
        self._file.flush()
        self._good_size = self._file.tell()

    def _reopen(self) -> None:
        with contextlib.suppress(OSError, ValueError):  # what failed may fail again here
            self._file.close()
        if self.path.exists() and self.path.stat().st_size > self._good_size:
            os.truncate(self.path, self._good_size)
        self._file = self._open()

    def close(self) -> None:
        self._file.close()
