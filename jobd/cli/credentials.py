"""The worker's token, read from a file only its own user can read (docs/security.md).

A token in the agent's environment can be read by its user's other processes
(`/proc/PID/environ`) for the agent's whole life, even after the agent forgets it: the
kernel shows the environment the process started with. A file of mode 0600 (or a
systemd credential, `LoadCredential=`) exposes it to nothing the file's mode does not.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from jobd.discovery import TokenError, usable_token

__all__ = ["TokenFileError", "read_token_file"]


class TokenFileError(Exception):
    """The token file cannot be used; the message says why and what to do."""


def read_token_file(path: Path) -> str:
    """The token in `path`, refused unless only its owner (this user, or root) may read it."""
    try:
        info = path.stat()
    except OSError as exc:
        raise TokenFileError(f"cannot read the token file {path}: {exc.strerror}") from None
    if not stat.S_ISREG(info.st_mode):
        raise TokenFileError(f"the token file {path} is not a regular file")
    if info.st_uid not in (os.getuid(), 0):
        raise TokenFileError(
            f"the token file {path} belongs to uid {info.st_uid}, not to this user "
            f"(uid {os.getuid()}): chown it, or run the worker as its owner"
        )
    mode = stat.S_IMODE(info.st_mode)
    if mode & 0o077:
        raise TokenFileError(
            f"the token file {path} may be read by others (mode {mode:04o}): chmod 600 {path}"
        )
    try:
        token = path.read_text().strip()
    except OSError as exc:
        raise TokenFileError(f"cannot read the token file {path}: {exc.strerror}") from None
    try:
        usable = usable_token(token, f"the token file {path}")
    except TokenError as exc:
        raise TokenFileError(str(exc)) from None
    if usable is None:
        raise TokenFileError(f"the token file {path} is empty")
    return usable
