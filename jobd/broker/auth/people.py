"""People: who a Unix user is to the broker, and which projects they reach.

A person reaches the broker three ways, and each ends here as a `Principal` with a user:

- **the Unix socket**: the kernel tells the peer's uid (`SO_PEERCRED`, read by the
  connection: broker/http/connections.py); its name is the broker host's (`pwd`). Root
  and members of `--admin-group` are admins; anyone else a user. No token is asked for,
  and no header can say otherwise.
- **a user token with a user** (`jobd token create --role user --user alice`).
- **a worker's vouching**: an agent relays its host's caller under its worker token with
  `X-Jobd-User` (as MUNGE vouches for a uid). A worker may vouch for users only: root
  and admins are refused (403), so a worker host's root never becomes the cluster's.

A user reaches the projects whose `members` name them, or one of their groups as
`@group` (their groups on the broker's host), and those whose `admins` do, where they
also change the jobs of others. A user token's `projects`, when given, narrow that: a
token never reaches further than its user would over the socket. A project that names
no members is reached by admins (and tokens of no user) only.

Accounts are looked up in the host's user database and kept `ACCOUNT_TTL_S`, so a
request costs no lookup; which projects each reaches is worked out per request from the
cluster view's projects (a few set operations: projects are tens, not thousands).
"""

from __future__ import annotations

import grp
import os
import pwd
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace

from jobd.api.identity import GROUP_PREFIX
from jobd.api.models import Project
from jobd.broker.auth.tokens import ADMIN, USER, Principal

__all__ = [
    "ACCOUNT_TTL_S",
    "VOUCH_HEADER",
    "Account",
    "NotAPerson",
    "People",
]

ACCOUNT_TTL_S = 10.0  # a user's groups as read from the host, kept this long
ACCOUNTS_KEPT = 4096  # past this many, the cache starts again (names come from requests)
VOUCH_HEADER = b"x-jobd-user"  # the user a worker's agent vouches for (lower case: ASGI's)


class NotAPerson(Exception):
    """The identity cannot be made a principal (HTTP 403); the message says why."""


@dataclass(frozen=True)
class Account:
    """A Unix user as the broker's host knows it; uid None: unknown here (by name only)."""

    name: str
    uid: int | None
    groups: tuple[str, ...] = ()


class People:
    """Makes people's principals; `projects` is the cluster view's (current with commits)."""

    def __init__(self, projects: Mapping[str, Project], admin_group: str | None = None) -> None:
        self.projects = projects
        self.admin_group = admin_group or None
        self._by_uid: dict[int, tuple[float, Account | None]] = {}
        self._by_name: dict[str, tuple[float, Account]] = {}

    # -- the three ways in

    def peer(self, uid: int) -> Principal:
        """The socket's caller, from the uid the kernel gave."""
        account = self._account_of_uid(uid)
        if account is None:
            raise NotAPerson(f"uid {uid} has no user name on the broker's host")
        role = ADMIN if self.is_admin(account) else USER
        return self._principal(account, f"uid {uid}", role, "socket")

    def of_token(self, token: Principal) -> Principal:
        """A user token's principal, for a request: its user's projects, narrowed by its own."""
        assert token.user is not None
        who = self._principal(self.account(token.user), token.label, USER, "token")
        if token.projects:
            who.projects &= token.projects
            who.admin_of &= token.projects
        who.token = token
        return who

    def vouched(self, worker: Principal, name: str) -> Principal:
        """The user a worker's agent vouches for; never root nor an admin (NotAPerson)."""
        account = self.account(name)
        if account.uid == 0 or name == "root":
            raise NotAPerson(
                f"worker {worker.worker!r} may not vouch for root: root acts over the "
                "broker's own socket, or with an admin token"
            )
        if self.is_admin(account):
            raise NotAPerson(
                f"worker {worker.worker!r} may not vouch for {name!r}, an admin (member of "
                f"{self.admin_group!r}): admins act over the broker's own socket or a token"
            )
        who = self._principal(account, f"{name} vouched by worker {worker.worker}", USER, "vouched")
        who.token = worker
        return who

    # -- accounts and reach

    def is_admin(self, account: Account) -> bool:
        return account.uid == 0 or (
            self.admin_group is not None and self.admin_group in account.groups
        )

    def account(self, name: str) -> Account:
        """The user of this name on the broker's host (by name only when unknown there)."""
        now = time.monotonic()
        held = self._by_name.get(name)
        if held is not None and held[0] > now:
            return held[1]
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            account = Account(name, None)
        else:
            account = Account(name, entry.pw_uid, _groups(name, entry.pw_gid))
        if len(self._by_name) >= ACCOUNTS_KEPT:
            self._by_name.clear()
        self._by_name[name] = (now + ACCOUNT_TTL_S, account)
        return account

    def reach(self, account: Account) -> tuple[frozenset[str], frozenset[str]]:
        """The projects the account is a member of, and those it is an admin of."""
        names = {account.name, *(GROUP_PREFIX + g for g in account.groups)}
        member, admin = set(), set()
        for project in self.projects.values():
            if not names.isdisjoint(project.spec.admins):
                admin.add(project.name)
                member.add(project.name)
            elif not names.isdisjoint(project.spec.members):
                member.add(project.name)
        return frozenset(member), frozenset(admin)

    def _principal(self, account: Account, label: str, role: str, via: str) -> Principal:
        member, admin = self.reach(account) if role == USER else (frozenset(), frozenset())
        return Principal(
            label,
            role,
            member,
            user=account.name,
            via=via,
            admin_of=admin,
            uid=account.uid,
            groups=account.groups,
        )

    def _account_of_uid(self, uid: int) -> Account | None:
        now = time.monotonic()
        held = self._by_uid.get(uid)
        if held is not None and held[0] > now:
            return held[1]
        try:
            name = pwd.getpwuid(uid).pw_name
        except KeyError:
            account = None
        else:
            account = replace(self.account(name), uid=uid)
        if len(self._by_uid) >= ACCOUNTS_KEPT:
            self._by_uid.clear()
        self._by_uid[uid] = (now + ACCOUNT_TTL_S, account)
        return account


def _groups(name: str, gid: int) -> tuple[str, ...]:
    """The names of the user's groups on this host (primary included)."""
    found = []
    for group_id in os.getgrouplist(name, gid):
        try:
            found.append(grp.getgrgid(group_id).gr_name)
        except KeyError:
            continue  # a gid of no name names no `@group`
    return tuple(sorted(set(found)))
