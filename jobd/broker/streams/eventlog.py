"""events.jsonl: the broker's greppable copy of the events table (CONTRACT.md §7).

The store commits an event together with the change that justifies it; EventLog appends
the line only after that commit, from a store listener (see wiring.py). The table is the
record; the file is derived from it, so a write that failed (a full disk, a closed file)
is made good from the table by `catch_up`, in order, before any later line.

At start the same catch-up completes the file after a crash (the broker killed between a
commit and its line). Each line carries the event's `seq`, so the file's last whole line
says where the file stands in the table; only the file's tail is read, whatever its
size. A half-written last line is cut off first (the table has that event too). A file
written before lines carried `seq` is located by matching its last line's text against
the table, read in pages: once, on the first start after the upgrade.

Rotation by size (`--events-max-bytes`, `--events-keep`): once a write has taken the file
to its cap, the file is renamed `events.jsonl.1` (the older ones one number up, the
oldest past `keep` overwritten) and a new one is started. Only whole writes are ever
renamed, so no line is split or lost; the start-up catch-up reads the newest rotated
file's last line when the live one has none yet (jobd/eventfiles.py names them).
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import BinaryIO, TextIO

from pydantic_core import to_json

from jobd.eventfiles import read_events, rotated
from jobd.logconfig import get_logger
from jobd.store.base import Change, EventRecord, EventStore

__all__ = [
    "DEFAULT_EVENTS_KEEP",
    "DEFAULT_EVENTS_MAX_BYTES",
    "EventLog",
    "highest_ids",
    "last_whole_line",
]

log = get_logger()

DEFAULT_EVENTS_MAX_BYTES = 100 << 20  # 100 MiB a file: ~400,000 lines
DEFAULT_EVENTS_KEEP = 5  # rotated files kept beside the live one


class EventLog:
    """Appends committed events to `<log dir>/events.jsonl`, one JSON object a line."""

    def __init__(
        self,
        log_dir: Path,
        store: EventStore,
        max_bytes: int = DEFAULT_EVENTS_MAX_BYTES,
        keep: int = DEFAULT_EVENTS_KEEP,
    ) -> None:
        log_dir.mkdir(parents=True, exist_ok=True)
        self.path = log_dir / "events.jsonl"
        self.store = store
        self.max_bytes = max_bytes  # 0: never rotate
        self.keep = max(keep, 1)
        last = last_whole_line(self.path)  # a half-written line is cut off here
        if last is None:  # just rotated: the newest rotated file says where the file stands
            last = last_whole_line(rotated(self.path, 1))
        self._never_reuse_ids(_seq_of(last))
        self._file: TextIO = self._open()
        # The size after the last whole write: a line written in part is cut back to it.
        self._good_size = self._file.tell()
        # While lines are missing: the seq of the first event the file lacks.
        self._missing_from: int | None = self._after(last)
        self.retry_s = 1.0
        self._retry_at = 0.0  # after a failure: when catch_up may try again
        self._complete_at_start()

    def complete(self) -> None:
        """Append what the table holds past the file's last line, as a start does: a
        standby broker elected leader (broker/leadership.py) heard none of the commits
        the leader before it made."""
        last = last_whole_line(self.path)
        if last is None:
            last = last_whole_line(rotated(self.path, 1))
        self._missing_from = self._after(last)
        self._complete_at_start()

    @property
    def behind(self) -> bool:
        """Lines are missing: the table has events the file does not."""
        return self._missing_from is not None

    def _after(self, last: bytes | None) -> int | None:
        """The seq of the first event after the file's last line; None: do not append."""
        if last is None:
            return 1
        seq = _seq_of(last)
        if seq is not None:
            return seq + 1
        found = self._find_in_table(last.decode("utf-8", "replace"))
        if found is None:
            log.warning("events_file_unmatched", path=str(self.path), line=last[:200].decode())
            return None
        return found + 1

    def _never_reuse_ids(self, last_seq: int | None) -> None:
        """Number on from the highest job id and seq this file has seen.

        A store younger than its events.jsonl (a SQLite file deleted under the broker,
        or an older copy put back) would hand out job ids and seqs again that the file
        already names: its counters are raised past them, once, and that is logged.
        The file is read whole only then (the store's newest event is below the file's).
        """
        if last_seq is None or last_seq <= self.store.last_event_seq():
            return
        raised = self.store.raise_counters(highest_ids(self.path))
        if raised:
            log.warning("store_counters_advanced", path=str(self.path), before=raised)

    def _find_in_table(self, line: str, page: int = 1000) -> int | None:
        """The seq of the newest event whose line (as written before `seq`) is `line`."""
        found, after = None, 0
        while records := self.store.list_events(after_seq=after, limit=page):
            for ev in records:
                if to_json(ev.as_json()).decode() == line:
                    found = ev.seq
            after = records[-1].seq
        return found

    def _complete_at_start(self) -> None:
        if self._missing_from is None:
            return
        before = self._good_size
        try:
            self.catch_up()
        except OSError as exc:  # a full log disk: the next commit or resync tries again
            log.error("events_file_behind", path=str(self.path), error=str(exc))
            return
        if self._good_size > before:
            log.warning(
                "events_file_completed", path=str(self.path), bytes=self._good_size - before
            )

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

    def catch_up(self, page: int = 1000, *, force: bool = False) -> None:
        """Append from the events table the lines this file missed, if any.

        After a failure (a full disk) it is tried at most once per `retry_s`: a busy
        broker commits hundreds of times a second, and each try would fail and be
        logged. Until then it returns with the file still `behind`; the storage watch
        (broker/storage.py) calls it with `force`, on its own slower beat, so the file
        catches up without a commit.
        """
        if self._missing_from is None or (not force and time.monotonic() < self._retry_at):
            return
        try:
            self._reopen()
            while records := self.store.list_events(after_seq=self._missing_from - 1, limit=page):
                self._append(records)
                self._missing_from = records[-1].seq + 1
        except OSError:
            self._retry_at = time.monotonic() + self.retry_s
            raise
        self._missing_from = None

    def _append(self, events: Sequence[EventRecord]) -> None:
        # The store already holds these durably; the file is a derived, greppable copy.
        try:
            self._file.write("".join(ev.line() + "\n" for ev in events))
            self._file.flush()
        except OSError:
            with contextlib.suppress(OSError):
                self._reopen()  # no half line left for a reader while the disk is full
            raise
        self._good_size = self._file.tell()
        if self.max_bytes and self._good_size >= self.max_bytes:
            self._rotate()

    def _rotate(self) -> None:
        """Start a new file; the full one becomes `.1`, the older ones a number up.

        Called only after a whole write, so every line stays whole in one file. A rename
        that fails (a read-only directory) leaves the live file growing: logged, and
        tried again after the next write.
        """
        try:
            for n in range(self.keep - 1, 0, -1):
                older = rotated(self.path, n)
                if older.exists():
                    older.replace(rotated(self.path, n + 1))
            self.path.replace(rotated(self.path, 1))
        except OSError as exc:
            log.error("events_file_not_rotated", path=str(self.path), error=str(exc))
            return
        self._file.close()
        self._file = self._open()
        self._good_size = 0
        log.info("events_file_rotated", path=str(self.path), keep=self.keep)

    def _reopen(self) -> None:
        with contextlib.suppress(OSError, ValueError):  # what failed may fail again here
            self._file.close()
        if self.path.exists() and self.path.stat().st_size > self._good_size:
            os.truncate(self.path, self._good_size)
        self._file = self._open()

    def close(self) -> None:
        with contextlib.suppress(OSError):  # what a full disk kept in the buffer: the table has it
            self._file.close()


def _seq_of(line: bytes | None) -> int | None:
    """The `seq` of an events.jsonl line, if it has one."""
    if line is None:
        return None
    try:
        seq = json.loads(line).get("seq")
    except (ValueError, AttributeError):
        return None
    return seq if isinstance(seq, int) else None


def highest_ids(path: Path) -> dict[str, int]:
    """The highest job id and seq named in events.jsonl and its rotated files, as the
    store's counters' floors."""
    job = seq = 0
    for doc in read_events(path):
        job = max(job, _int(doc.get("job")))
        seq = max(seq, _int(doc.get("seq")))
    return {"event_seq": seq, "job_id": job}


def _int(value: object) -> int:
    return value if isinstance(value, int) else 0


def last_whole_line(path: Path, block: int = 64 * 1024) -> bytes | None:
    """The file's last complete line (without its newline), reading only its tail.

    What follows the last newline (a line cut short by a crash) is truncated away first.
    None when the file holds no complete line.
    """
    if not path.exists():
        return None
    with path.open("r+b") as f:
        size = f.seek(0, os.SEEK_END)
        end = _last_newline(f, size, block)
        if end + 1 < size:  # a half-written line: the table has its event
            f.truncate(end + 1)
        if end < 0:
            return None
        begin = _last_newline(f, end, block) + 1
        f.seek(begin)
        return f.read(end - begin)


def _last_newline(f: BinaryIO, before: int, block: int) -> int:
    """The offset of the last newline before offset `before`, read backwards; -1: none."""
    while before > 0:
        start = max(0, before - block)
        f.seek(start)
        found = f.read(before - start).rfind(b"\n")
        if found >= 0:
            return start + found
        before = start
    return -1
