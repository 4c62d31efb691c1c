"""A job attempt's state directory: JSON files replaced whole, and the lock a live shim holds.

Every JSON file is replaced whole (temp file, fsync, rename, fsync of the directory), so a
reader sees the old file or the new, never a part. The directory itself is flock'ed by
the shim serving the job until status.json is written: no lock file to make or remove
(on a busy worker, every file made and removed per job costs the inode allocator).

Standard library only (the shim and the agent both use it).
"""

from __future__ import annotations

import _thread
import fcntl
import os

from jobd.worker.shim import jsontext
from jobd.worker.shim.protocol import LEGACY_LOCK_FILE

# typing.TYPE_CHECKING without importing typing, which would cost every shim 0.4 MiB.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    # A path as the shim passes it (a string: pathlib is 2 MiB of a shim) or the agent.
    StrPath = str | os.PathLike[str]

__all__ = ["lock_is_held", "open_append", "read_json", "take_lock", "write_json_atomic"]


def write_json_atomic(path: StrPath, data: dict[str, Any], durable: bool = True) -> None:
    """Replace path with data, so a reader sees the old whole file or the new, never a part.

    durable: fsync'd, so it survives a power cut too; without, it survives any process's
    death (what only this boot's processes need to read).
    """
    # Unique per thread too: an agent may save from several threads at once. Plain
    # strings, not pathlib: a shim writes two of these per job.
    directory, name = os.path.split(os.fspath(path))
    directory = directory or os.curdir
    tmp = f"{directory}/.{name}.{os.getpid()}.{_thread.get_ident()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        try:
            payload = jsontext.dumps(data, sort_keys=True).encode() + b"\n"
            while payload:
                payload = payload[os.write(fd, payload) :]
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        # A full disk, say: leave no half-written file behind to hold its space.
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    if not durable:
        return
    dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(dir_fd)  # the rename itself survives a power cut
    finally:
        os.close(dir_fd)


def read_json(path: StrPath) -> dict[str, Any] | None:
    """The object in path, or None if it is missing or not a JSON object."""
    try:
        with open(path, "rb") as file:
            data = jsontext.loads(file.read())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def open_append(path: StrPath) -> int:
    return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)


def lock_is_held(state_dir: StrPath) -> bool:
    """Whether a shim holds the state directory's lock, i.e. is alive."""
    return _held(state_dir) or _held(os.path.join(state_dir, LEGACY_LOCK_FILE))


def _held(path: StrPath) -> bool:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # also drops the shared lock we may have taken
    return False


def take_lock(state_dir: StrPath) -> int | None:
    """The directory's lock, as an fd to keep open (None: another process holds it)."""
    fd = os.open(state_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd
