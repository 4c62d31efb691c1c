"""The SQLite file under an open store: still the one opened, and still whole.

SQLite keeps writing to the file it opened even after that file was deleted (or replaced
by another at the same path): every commit succeeds, and all of it is gone at the next
start. A file truncated under the store is written to as well, and found malformed at the
next start. So the store remembers the device and inode of its file when it opens it,
and `check` compares them with what the path names now, before each write transaction
(one `os.stat`: about two microseconds) and around each checkpoint (once a second at
most). Only `os.stat`: the file is never opened here, see `damaged_file`. A difference
is permanent for this process: writes are refused with `StoreFileLost` until jobd is
restarted on a sound file, and it is logged once.

At open, a file that exists but is empty or shorter than SQLite's header is refused
(`damaged_file`): opening it would start an empty store in its place, or fail with a
traceback deep in a migration. A file truncated under the store is
cut back after the store closes (`after_close`), so that the next start refuses it too.
"""

from __future__ import annotations

import os
from pathlib import Path

from sqlalchemy.engine import make_url

from jobd.logconfig import get_logger
from jobd.store.base import StoreUnavailable

__all__ = ["StoreFile", "StoreFileLost", "damaged_file", "sqlite_path"]

log = get_logger()

_HEADER_SIZE = 100  # a database file is never shorter than its header


class StoreFileLost(StoreUnavailable):
    """The store's file was deleted, replaced or truncated under the running store."""


def sqlite_path(url: str) -> Path | None:
    """The file of a SQLite URL; None for PostgreSQL or an in-memory database."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        return None
    path = parsed.database
    return Path(path) if path and path != ":memory:" else None


def damaged_file(path: Path) -> str | None:
    """Why the existing file at `path` cannot be a SQLite store, or None if it may be.

    Only `os.stat`, never an open: closing any descriptor of a file drops every POSIX
    lock this process holds on it, SQLite's included. A file without SQLite's header
    is SQLite's to refuse ("file is not a database", said as damaged by faults.py).
    """
    try:
        size = os.stat(path).st_size
    except FileNotFoundError:
        return None  # a new store
    if size < _HEADER_SIZE:
        return f"is truncated ({size} bytes, shorter than a SQLite header)"
    return None


class StoreFile:
    """The identity (device, inode) of the file a store opened, checked against its path."""

    def __init__(self, path: Path) -> None:
        self.path = path
        st = os.stat(path)
        self._identity = (st.st_dev, st.st_ino)
        self.fault: StoreFileLost | None = None  # once set, for good: see the docstring
        self._cut_to: int | None = None  # the size of the file found truncated

    def check(self) -> None:
        """Raise StoreFileLost unless the path still names the file opened, whole."""
        if self.fault is None:
            why = self._why_lost()
            if why is not None:
                self._lose(why)
        if self.fault is not None:
            raise self.fault

    def _why_lost(self) -> str | None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return "was deleted under the running broker"
        if (st.st_dev, st.st_ino) != self._identity:
            return "was replaced under the running broker (another file is at its path)"
        if st.st_size < _HEADER_SIZE:
            self._cut_to = st.st_size
            return f"was truncated to {st.st_size} bytes under the running broker"
        return None

    def after_close(self) -> None:
        """Leave a file found truncated as it was found, whatever closing wrote into it.

        The last connection to close copies SQLite's write-ahead log back into the
        file: into a truncated one, that makes a file with SQLite's header and holes
        where the pages copied before the cut were, which the next start would open
        as if it were sound. Cut back, the next start refuses it in one sentence.
        """
        if self._cut_to is None:
            return
        try:
            st = os.stat(self.path)
            if (st.st_dev, st.st_ino) == self._identity and st.st_size > self._cut_to:
                os.truncate(self.path, self._cut_to)
        except OSError as exc:
            log.error("store_file_not_cut_back", path=str(self.path), error=str(exc))

    def _lose(self, why: str) -> None:
        self.fault = StoreFileLost(
            f"the store at {self.path} {why}: writes are refused; "
            "restart jobd (on a restored copy of the file if you have one)"
        )
        log.error("store_file_replaced", path=str(self.path), error=str(self.fault))
