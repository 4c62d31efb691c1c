"""Whether a broker still runs on a store: what `jobd migrate-store` asks before it copies.

A copy taken while a broker runs on its source misses what that broker writes afterwards,
and a broker started on the target would then schedule beside the old one. Each kind of
store says it in its own way:

- **SQLite**: every connection to a store in WAL mode holds a read lock on one byte of
  its `-shm` file (SQLite's unix VFS, the "DMS" byte at offset 128) for as long as it is
  open, and the lock goes with the process. Asking for a write lock there (`F_GETLK`,
  which takes nothing) names a process that has the store open. No `-shm` file: nobody
  has opened it since the last one closed it.
- **PostgreSQL**: the leader renews the `leader_lease` row every retry period; a holder
  whose lease has not run out is a broker that leads (or one that died less than a lease
  ago). A store from before the lease (no table) says nothing.

Next stage: the copy refuses (store/copying.py, `SourceInUse`), or goes on.
"""

from __future__ import annotations

import fcntl
import os
import struct
from pathlib import Path

import sqlalchemy as sa

from jobd.store.sql.leadership import LeaderLease
from jobd.store.sql.storefile import sqlite_path

__all__ = ["broker_on"]

_SHM_DMS = 128  # the byte of the -shm file every open connection holds a read lock on
_FLOCK = "hhqqi"  # struct flock on Linux: type, whence, start, len, pid


def broker_on(url: str, where: str) -> str | None:
    """What says a broker still runs on the store at `url` (`where`, as the user named
    it), as a sentence; None when nothing does, or it cannot be told (the copy then finds
    out what it can reach)."""
    path = sqlite_path(url)
    if path is not None:
        pid = _holder_of(path)
        return None if pid is None else f"{_process(pid)} has {where} open: a broker runs on it"
    return _leader_of(url, where)


def _holder_of(path: Path) -> int | None:
    """A process that has the SQLite store at `path` open, by its pid; None when none has."""
    try:
        fd = os.open(f"{path}-shm", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None  # none since the last close (or not ours to read)
    try:
        asked = struct.pack(_FLOCK, fcntl.F_WRLCK, os.SEEK_SET, _SHM_DMS, 1, 0)
        kind, _, _, _, pid = struct.unpack(_FLOCK, fcntl.fcntl(fd, fcntl.F_GETLK, asked))
    finally:
        os.close(fd)
    return None if kind == fcntl.F_UNLCK else pid


def _process(pid: int) -> str:
    """`pid 4537 (jobd broker --port 8765)`, as much of its command line as is readable."""
    try:
        found = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return f"pid {pid}"
    argv = [os.path.basename(word) for word in found.split("\0") if word][:5]
    if len(argv) > 1 and argv[0].startswith("python"):
        argv = argv[1:]  # the script the interpreter runs: `jobd`, not `python3`
    return f"pid {pid} ({' '.join(argv[:4])})" if argv else f"pid {pid}"


def _leader_of(url: str, where: str) -> str | None:
    try:
        lease = LeaderLease(url, "jobd migrate-store", "", 6.0)
    except sa.exc.SQLAlchemyError:
        return None  # no URL SQLAlchemy takes: the copy says so
    try:
        held = lease.read()
    except sa.exc.SQLAlchemyError:
        return None  # no lease table (an older store), or no database to ask
    finally:
        lease.close()
    if not held.live:
        return None
    return (
        f"the broker {held.holder} ({held.url or 'no url'}) leads on {where}: its lease "
        f"runs {held.left_s:.1f} s more"
    )
