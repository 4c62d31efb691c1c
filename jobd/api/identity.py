"""Who a person is to jobd: Unix user and group names, as members, owners and tokens name them.

A job's owner (`metadata.owner`) is the Unix user the broker knew the caller as (from the
kernel over the Unix socket, or from a user token over TCP), never what a request body
says; a worker running as root starts the job as that user. A project names its members
and admins as user names, or group names after `@` (`@ml-lab`): whoever is in the group
on the broker's host.

The names are checked here, once, for everything that takes one (members, admins, a
token's user, an owner): a POSIX-portable user name of at most 32 characters, starting
with a letter or `_`, as `useradd` takes by default. So `../root`, a name with a NUL, a
space or a slash is refused wherever it is given, before it reaches a path or a lookup.

Standard library only: the worker and the CLI check names before pydantic is loaded.
"""

from __future__ import annotations

import re

__all__ = [
    "GROUP_PREFIX",
    "MAX_MEMBERS",
    "MAX_USER_NAME",
    "MAX_WORKER_USERS",
    "MEMBER_PATTERN",
    "RUNS_AS_PATTERN",
    "USER_NAME_PATTERN",
    "check_member",
    "check_user_name",
]

MAX_USER_NAME = 32  # Linux's utmp limit, and useradd's
MAX_MEMBERS = 1000  # names in a project's members or admins
# The user names a worker publishes at most (Worker status.users); a host with more
# publishes none, and any owner is placed there (checked at launch: worker/owners.py).
MAX_WORKER_USERS = 2048
GROUP_PREFIX = "@"
_NAME = r"[A-Za-z_][A-Za-z0-9_.-]{0,30}[A-Za-z0-9_$-]?"
USER_NAME_PATTERN = rf"^{_NAME}$"
# Whom a worker runs jobs as (Worker status.runs_as): `owner`, or its user's name or uid.
RUNS_AS_PATTERN = rf"^(?:{_NAME}|[0-9]{{1,10}})$"
MEMBER_PATTERN = rf"^@?{_NAME}$"
_USER = re.compile(_NAME)


def check_user_name(name: str) -> str:
    """`name` if it is a Unix user (or group) name jobd takes; ValueError saying why not."""
    if not _USER.fullmatch(name):
        raise ValueError(
            f"{name!r} is not a user name: 1-{MAX_USER_NAME} letters, digits, '_', '.', '-', "
            "starting with a letter or '_'"
        )
    return name


def check_member(member: str) -> str:
    """`member` if it is a user name, or `@` and a group name; ValueError when not."""
    check_user_name(member.removeprefix(GROUP_PREFIX))
    return member
