"""The daemons' files kept to their owner: the umask set first, wider modes said at start.

The rule and the check are jobd/filemodes.py's (the worker uses them too); here the
daemons apply them to their own directories and log what is wider, one structured
warning a path, with the chmod that narrows it.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from jobd.filemodes import GROUP_READABLE, PRIVATE, restrict_umask, too_wide
from jobd.logconfig import get_logger

__all__ = ["keep_files_private", "warn_wide_modes"]

# The chmod that takes away what a mask forbids, and keeps every other bit.
_NARROWING = {PRIVATE: "go-rwx", GROUP_READABLE: "g-w,o-rwx"}


def keep_files_private(group_readable: bool) -> int:
    """Before the daemon creates anything: its umask; the mode bits its paths must lack."""
    return restrict_umask(group_readable)


def warn_wide_modes(roots: Iterable[Path | None], mask: int) -> int:
    """Warn of each directory or file under roots that others (or the group) may read;
    how many were found."""
    found = 0
    for path, mode in too_wide([r for r in roots if r is not None], mask):
        get_logger().warning(
            "file_mode_too_wide",
            path=str(path),
            mode=f"{mode:04o}",
            fix=f"chmod {_NARROWING[mask]} {path}",
        )
        found += 1
    return found
