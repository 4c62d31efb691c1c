"""Who may read what the daemons write: their umask, and the check of modes at start.

The store (`jobd.db` and its WAL), `events.jsonl` and the job logs hold what jobs were
given, secret env values among them until they are scrubbed. The daemons therefore
create their directories 0700 and their files 0600 (CONTRACT.md §2): their umask is
set to 077 (027 with --group-readable: 0750 and 0640) before they create anything, and
every directory and file they make takes its mode from it. A workload keeps the umask
the daemon was started with (the worker starts its supervisors with it): a job's own
files are the job's business.

What an older jobd, or an operator, left wider is not changed behind anyone's back: the
check at start says which paths are wider than they should be, one warning each.

Standard library only: the worker and the broker both use it.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Iterator
from pathlib import Path

__all__ = ["GROUP_READABLE", "PRIVATE", "TRAVERSE", "restrict_umask", "started_umask", "too_wide"]

PRIVATE = 0o077  # no bit for group or others
TRAVERSE = 0o011  # group and others may pass through a directory, never list it
GROUP_READABLE = 0o027  # the group may read and enter; others nothing
_started: int | None = None  # the umask this process was started with, once restricted


def restrict_umask(group_readable: bool = False) -> int:
    """Set this process's umask for the daemon's files; the mask of bits they must lack."""
    global _started
    mask = GROUP_READABLE if group_readable else PRIVATE
    previous = os.umask(mask)
    if _started is None:
        _started = previous
    return mask


def started_umask() -> int:
    """The umask to give a workload: the one this process started with (-1: unchanged)."""
    return -1 if _started is None else _started


def too_wide(roots: Iterable[Path], mask: int, limit: int = 100) -> Iterator[tuple[Path, int]]:
    """(path, mode) of each directory or file under roots with a bit of `mask` set.

    Symbolic links are not followed (their own mode means nothing). A directory that
    others may only traverse (0711: a root worker's, on the way to a job owner's output
    files, jobd.worker.shim.owner) is not wide: nothing in it can be listed or read
    through that bit. At most `limit` paths, so a start after years of wide job logs says
    enough without flooding.
    """
    found = 0
    for path in _walk(roots):
        try:
            info = path.lstat()
        except OSError:
            continue  # gone meanwhile
        mode = stat.S_IMODE(info.st_mode)
        wide = mode & mask & ~TRAVERSE if stat.S_ISDIR(info.st_mode) else mode & mask
        if wide:
            yield path, mode
            found += 1
            if found >= limit:
                return


def _walk(roots: Iterable[Path]) -> Iterator[Path]:
    seen: list[Path] = []
    for root in roots:
        if any(root.is_relative_to(s) for s in seen) or not root.exists():
            continue  # walked already, as part of another root (dev's worker state)
        seen.append(root)
        yield root
        for directory, dirs, files in os.walk(root):
            base = Path(directory)
            for name in sorted(dirs) + sorted(files):
                yield base / name
