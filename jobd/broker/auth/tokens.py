"""Bearer tokens with roles: made, stored as digests, resolved to a principal per request.

A token is `jobd_` and 32 random bytes (43 characters of URL-safe base64). The store
keeps its SHA-256 digest only: the token is printed once, when it is made. A fast hash
is the right one here. bcrypt and its kin are slow on purpose, to make guessing a
*password* of little entropy expensive; guessing 256 random bits is hopeless at any
speed, and a slow hash would cost every request milliseconds (the submit path answers
in a quarter of one). With a fast hash the broker can key its table by the digest
itself: finding a request's principal is one SHA-256 and one dict hit, no store query.

The broker holds the whole table in memory (`Tokens`): read at start, again after each
change it makes, and once a second from the store, so a token revoked by `jobd token`
against the store directly counts within a second. A token it does not know is looked up
in the store before it is refused, so one `jobd token create` made against the store
works the moment it is printed; a flood of unknown tokens cannot turn that into a flood
of store reads: only tokens of jobd's own form are looked up, a token refused once is
remembered as refused (the newest `REFUSED_KEPT`), and such reads are rate-bounded
(`MISS_READS_PER_S`). When a token was last used is kept in memory and written at most
once a minute (`flush`), never per request.

The admin token of CONTRACT.md §8 (`JOBD_TOKEN`, else `<data-dir>/admin.token`) is an
admin principal of its own, `admin.token`; it is not in the table.
"""

from __future__ import annotations

import hashlib
import ipaddress
import secrets
import time
from dataclasses import dataclass
from datetime import UTC, datetime

from jobd.store.base import Store, StoreUnavailable, TokenRecord
from jobd.wire.models import TokenInfo, TokenRequest

__all__ = [
    "ADMIN",
    "BUILTIN_LABEL",
    "MIN_EXPOSED_TOKEN",
    "TOKEN_PREFIX",
    "USER",
    "WORKER",
    "Principal",
    "Tokens",
    "digest",
    "is_loopback",
    "mint",
    "token_info",
    "weak_token_refusal",
]

ADMIN = "admin"
USER = "user"
WORKER = "worker"
BUILTIN_LABEL = "admin.token"  # the principal of JOBD_TOKEN / <data-dir>/admin.token
TOKEN_PREFIX = "jobd_"  # so a token pasted somewhere is recognisable (secret scanners)
MIN_EXPOSED_TOKEN = 32  # characters an admin token needs on a non-loopback address
REFUSED_KEPT = 4096  # unknown tokens remembered as refused, so asking again reads nothing
MISS_READS_PER_S = 10.0  # store reads an unknown token may cause, a second (burst: as many)
_PREFIX_BYTES = TOKEN_PREFIX.encode()


@dataclass(eq=False)
class Principal:
    """Who a request comes from, as its token or the kernel says: resolved once per
    request, by the auth middleware (broker/auth/people.py for a person's)."""

    label: str
    role: str
    projects: frozenset[str] = frozenset()
    worker: str | None = None
    # The Unix user it speaks for (api/identity.py): a user token's user, or the peer of
    # the Unix socket. None: a token of no user (the jobs it makes have no owner).
    user: str | None = None
    last_used: float = 0.0  # time.time() of the newest request; written by Tokens.flush
    # How the broker knows it: `token`, `socket` (the peer's uid), or `vouched` (a
    # worker's agent relaying its host's user).
    via: str = "token"
    # A person's: the projects it may change every job of (a project's `admins`).
    admin_of: frozenset[str] = frozenset()
    uid: int | None = None  # the socket peer's, or the user's on the broker's host
    groups: tuple[str, ...] = ()  # the user's groups on the broker's host
    # The token principal a person's stands on (a user token's): revoking it ends both.
    token: Principal | None = None

    @property
    def admin(self) -> bool:
        return self.role == ADMIN

    @property
    def person(self) -> bool:
        """A user who owns jobs: changes only their own, unless an admin of the project."""
        return self.role == USER and self.user is not None


def digest(token: str | bytes) -> bytes:
    raw = token.encode() if isinstance(token, str) else token
    return hashlib.sha256(raw).digest()


def _principal(record: TokenRecord) -> Principal:
    return Principal(
        record.label, record.role, frozenset(record.projects), record.worker, record.user
    )


class Tokens:
    """The digest of every valid token, and its principal."""

    def __init__(self, store: Store, admin_token: str) -> None:
        self.store = store
        self.builtin = Principal(BUILTIN_LABEL, ADMIN)
        self._builtin_digest = digest(admin_token)
        self._by_digest: dict[bytes, Principal] = {self._builtin_digest: self.builtin}
        self._by_label: dict[str, tuple[bytes, Principal]] = {}
        self._flushed = time.time()
        self._refused: dict[bytes, None] = {}  # digests, oldest first
        self._read_credit, self._credit_at = MISS_READS_PER_S, time.monotonic()
        self.reload()

    def resolve(self, authorization: bytes) -> Principal | None:
        """The principal of an `Authorization: Bearer <token>` value; None: refused.

        Exactly one scheme, spelt so, one space, then the token: anything else (Basic, a
        prefix of a token, a token with a suffix) digests to nothing known.
        """
        if not authorization.startswith(b"Bearer "):
            return None
        key = hashlib.sha256(authorization[7:]).digest()
        found = self._by_digest.get(key)
        if found is None and authorization.startswith(_PREFIX_BYTES, 7):
            found = self._look_up(key)
        if found is not None:
            found.last_used = time.time()
        return found

    def names_project(self, project: str) -> bool:
        """Whether a valid token is made for `project` (a user token of its projects)."""
        return any(project in p.projects for p in self._by_digest.values())

    def holds(self, who: Principal) -> bool:
        """Whether `who` is still the principal of a valid token (not revoked since); a
        socket peer's stands on no token, and holds while its connection does."""
        if who.via == "socket":
            return True
        base = who.token or who
        found = self._by_label.get(base.label)
        return found is not None and found[1] is base

    def _look_up(self, key: bytes) -> Principal | None:
        """A token unknown here, made against the store since it was last read: read it
        again now, unless this token was refused before or such reads are spent."""
        if key in self._refused or not self._may_read():
            return None
        try:
            self.reload()
        except StoreUnavailable:
            return None
        found = self._by_digest.get(key)
        if found is None:
            self._refused[key] = None
            if len(self._refused) > REFUSED_KEPT:
                del self._refused[next(iter(self._refused))]
        return found

    def _may_read(self) -> bool:
        """A token bucket: MISS_READS_PER_S reads a second, as many at once."""
        now = time.monotonic()
        credit = self._read_credit + (now - self._credit_at) * MISS_READS_PER_S
        self._read_credit, self._credit_at = min(credit, MISS_READS_PER_S), now
        if self._read_credit < 1:
            return False
        self._read_credit -= 1
        return True

    def reload(self) -> None:
        """Read the table again; a token that stays keeps its principal (the same object,
        so `holds` tells a revoked one, and when it was last used)."""
        old = self._by_digest
        table = {self._builtin_digest: self.builtin}
        for record in self.store.list_tokens():
            key = bytes.fromhex(record.digest)
            table[key] = old.get(key) or _principal(record)
        self._by_digest = table  # swapped whole: a request never sees half a table
        self._by_label = {p.label: (d, p) for d, p in table.items()}

    def by_label(self, label: str) -> tuple[bytes, Principal] | None:
        """The digest and principal of the valid token of this label; None: none is (the
        dashboard's sessions name their token so: a revoked one ends them)."""
        return self._by_label.get(label)

    def flush(self) -> int:
        """Write when each stored token was last used, for those used since the last flush."""
        since, self._flushed = self._flushed, time.time()
        used = {
            p.label: _rfc3339(p.last_used)
            for p in self._by_digest.values()
            if p is not self.builtin and p.last_used >= since
        }
        self.store.touch_tokens(used)
        return len(used)

    def create(self, request: TokenRequest) -> tuple[str, TokenRecord]:
        token, record = mint(self.store, request)
        self.reload()
        return token, record

    def revoke(self, label: str) -> None:
        self.store.delete_token(label)
        self.reload()


def mint(store: Store, request: TokenRequest) -> tuple[str, TokenRecord]:
    """A new token and its stored record; the token itself is kept nowhere."""
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    label = request.name or f"{request.role}-{secrets.token_hex(3)}"
    record = TokenRecord(
        label=label,
        digest=digest(token).hex(),
        role=request.role,
        projects=tuple(sorted(set(request.projects))),
        worker=request.worker,
        created_at=_rfc3339(time.time()),
        user=request.user,
    )
    store.create_token(record)
    return token, record


def token_info(record: TokenRecord) -> TokenInfo:
    return TokenInfo(
        label=record.label,
        role=record.role,
        projects=list(record.projects),
        worker=record.worker,
        user=record.user,
        created_at=record.created_at,
        last_used_at=record.last_used_at,
    )


def _rfc3339(ts: float) -> str:
    moment = datetime.fromtimestamp(ts, UTC)
    return moment.isoformat(timespec="seconds").replace("+00:00", "Z")


# -- listening beyond loopback


def is_loopback(host: str) -> bool:
    """Whether binding `host` serves this machine only (0.0.0.0 and :: serve every address)."""
    if host.lower() in ("localhost", "localhost.localdomain", "ip6-localhost"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a name: it may resolve to anything


def weak_token_refusal(host: str, admin_token: str | None) -> str | None:
    """Why the broker must not listen on `host` with this admin token; None: it may.

    `admin_token` None: none is set and `<data-dir>/admin.token` will be made (43
    characters). Loopback stays permissive: only this machine's users reach it.
    """
    if is_loopback(host) or admin_token is None or len(admin_token) >= MIN_EXPOSED_TOKEN:
        return None
    return (
        f"jobd: refusing to listen on {host}, beyond loopback, with an admin token of "
        f"{len(admin_token)} characters (at least {MIN_EXPOSED_TOKEN} are needed there): set "
        "JOBD_TOKEN to a long random one (python3 -c 'import secrets; "
        "print(secrets.token_urlsafe(32))'), or unset it to use <data-dir>/admin.token, "
        "and give people their own tokens with `jobd token create`."
    )
