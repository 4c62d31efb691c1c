"""Whose jobs this worker runs, and as whom (issue 24 item 2).

A worker running as root starts each job of an owner (`metadata.owner`) as that owner's
Unix user, looked up by name on this host (jobd.worker.shim.owner does the switch). A
worker running as any other user cannot change users: it runs every job as itself, as
the seed has it, and says so at start. A job of no owner (the admin token's) runs as the
worker's user either way.

The worker publishes the user names its host knows (`status.users`: pwd.getpwall(),
which lists /etc/passwd and whatever NSS source enumerates), so the scheduler places a
job only where its owner exists (controllers/eligibility.py). `--allow-user` narrows the
list to named users (a box kept for some people). Past MAX_WORKER_USERS names, or on a
non-root worker without `--allow-user`, it publishes none: any owner is placed here. Either
way the agent looks the owner up again at launch, and a job whose owner this host does
not know (a user removed since, an NSS source that does not enumerate and does not
answer) fails `OwnerUnknown`.
"""

from __future__ import annotations

import os
import pwd
import re
import time
from collections.abc import Sequence
from pathlib import Path

from jobd.api.identity import MAX_WORKER_USERS, USER_NAME_PATTERN
from jobd.worker.shim.owner import RunAs, look_up

__all__ = [
    "OWNER_UNKNOWN",
    "OwnerUnknown",
    "PublishedUsers",
    "checkpoint_dir_for",
    "closed_to_owners",
    "published_users",
    "run_as",
    "runs_as_owners",
    "runs_as_text",
]

OWNER_UNKNOWN = "OwnerUnknown"
_TRAVERSE = 0o011  # group and others may pass through, never list (jobd.filemodes)


class OwnerUnknown(Exception):
    """The job's owner cannot run here: not a user of this host, or not one of --allow-user."""

    reason = OWNER_UNKNOWN


def runs_as_owners() -> bool:
    """Whether this worker can start jobs as their owners: only root can change users."""
    return os.geteuid() == 0


def runs_as_text() -> str:
    """What the worker says it runs jobs as (its status.runs_as): `owner`, or its user."""
    if runs_as_owners():
        return "owner"
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return str(os.geteuid())


def published_users(allowed: Sequence[str] | None) -> list[str] | None:
    """The owners the scheduler may place here (None: any). A root worker lists its
    host's users: those of `allowed` (the `--allow-user`) it finds, each looked up by
    name (so a directory that does not enumerate answers too), else every user it can
    enumerate; a worker not root lists `allowed`, as given."""
    if not runs_as_owners():
        return None if allowed is None else sorted(set(allowed))
    if allowed is not None:
        names = {name for name in allowed if _exists(name)}
    else:
        valid = re.compile(USER_NAME_PATTERN)
        names = {entry.pw_name for entry in pwd.getpwall() if valid.match(entry.pw_name)}
    if len(names) > MAX_WORKER_USERS:
        return None
    return sorted(names)


def _exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


class PublishedUsers:
    """The owners the worker publishes, looked at again at most every REFRESH_S (a user
    added to the host while the worker runs is placed there within a minute)."""

    REFRESH_S = 60.0

    def __init__(self, allowed: Sequence[str] | None) -> None:
        self.allowed = allowed
        self.users = published_users(allowed)  # as the registration says them
        self.said = self.users  # as the broker last took them
        self._at = time.monotonic()

    def changed(self) -> list[str] | None:
        """The list when it differs from what the broker last took (said again until a
        heartbeat carrying it is answered: `taken`); None otherwise, and when the host
        grew past MAX_WORKER_USERS (the next registration says "any")."""
        if time.monotonic() - self._at >= self.REFRESH_S:
            self._at = time.monotonic()
            users = published_users(self.allowed)
            if users is not None:
                self.users = users
        return None if self.users == self.said else self.users

    def taken(self, users: list[str] | None) -> None:
        """A heartbeat carrying `users` (None: none) was answered."""
        if users is not None:
            self.said = users


def run_as(owner: str | None, allowed: Sequence[str] | None) -> RunAs | None:
    """Whom a job of `owner` runs as here: None for the worker's own user (no owner, or
    a worker that is not root); OwnerUnknown when the owner may not or cannot run here."""
    if owner is None:
        return None
    if allowed is not None and owner not in allowed:
        raise OwnerUnknown(f"user {owner} is not one of this worker's --allow-user")
    if not runs_as_owners():
        return None
    try:
        return look_up(owner)
    except (LookupError, PermissionError) as exc:
        raise OwnerUnknown(str(exc)) from None


def closed_to_owners(state_dir: Path, checkpoint_root: Path) -> list[Path]:
    """The directories above the worker's state directory and checkpoint root that others
    may not pass through: owners could not reach their output files and checkpoint
    directories (the worker opens its own directories to passing, never to listing, when
    it first runs a job of an owner; those above are an operator's)."""
    closed: list[Path] = []
    for own in (state_dir, checkpoint_root):
        for above in own.absolute().parents:
            if above.is_dir() and not above.stat().st_mode & 0o001 and above not in closed:
                closed.append(above)
    return closed


def _traversable(directory: Path) -> None:
    try:
        mode = directory.stat().st_mode & 0o777
    except FileNotFoundError:
        return  # made when the first job needs it (checkpoint_dir_for opens it then)
    if mode & _TRAVERSE != _TRAVERSE:
        os.chmod(directory, mode | _TRAVERSE)


def checkpoint_dir_for(path: Path, who: RunAs) -> None:
    """Give the job's checkpoint directory to its owner, 0700; its root (the worker's,
    shared by every owner) stays the worker's but traversable (0711), never listable."""
    os.chown(path, who.uid, who.gid)
    os.chmod(path, 0o700)
    _traversable(path.parent)
