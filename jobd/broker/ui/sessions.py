"""The dashboard's login: one-time codes, and the signed session cookie they become.

`job ui` asks the broker for a code (`POST /login-codes`, with its bearer token) and
prints the URL carrying it, `/ui/login?code=...`; the browser that opens it trades the
code for a session cookie. A code is random, works once and only for `CODE_TTL_S`
seconds; codes live in the broker's memory (a restart voids the outstanding ones).

The cookie names the token it was made from (its label), a fingerprint of that token's
digest and its expiry, under an HMAC keyed by `<data-dir>/ui-session.key`: without the
key nobody forges or extends one. Every request checks it against the broker's token
table (broker/auth/tokens.py), so revoking the token, or making another under its label,
ends its sessions at once; and the session's principal is the token's own, so a user
token's session sees only its projects, as the token does.

Signing out ends the session on the server too, not only in the browser that forgets
its cookie: the ended sessions (by signature, until they would have expired) are kept
in memory and in `<data-dir>/ui-sessions-ended`, so a copy of the cookie is refused
after a restart as well.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import json
import os
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from jobd.broker.auth.access import Forbidden
from jobd.broker.auth.tokens import Principal, Tokens

__all__ = ["CODE_TTL_S", "COOKIE", "ENDED_FILE", "SESSION_TTL_S", "Sessions", "load_key"]

CODE_TTL_S = 60.0
SESSION_TTL_S = 12 * 3600.0
COOKIE = "jobd_session"
KEY_FILE = "ui-session.key"
ENDED_FILE = "ui-sessions-ended"  # one line per session signed out: signature, expiry
_MAX_CODES = 1024  # outstanding at once; the oldest give way beyond


@dataclass(frozen=True)
class _Code:
    label: str
    fingerprint: str
    expires: float


def load_key(data_dir: Path) -> bytes:
    """The broker's session key, made (0600) on first use: sessions outlive a restart."""
    path = data_dir / KEY_FILE
    if not path.exists():
        data_dir.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # another broker start made it meanwhile
            pass
        else:
            with os.fdopen(fd, "w") as f:
                f.write(secrets.token_hex(32) + "\n")
    return bytes.fromhex(path.read_text().strip())


class Sessions:
    def __init__(
        self,
        tokens: Tokens,
        key: bytes,
        clock: Callable[[], float] = time.time,
        ended_file: Path | None = None,
    ) -> None:
        self.tokens = tokens
        self._key = key
        self._clock = clock
        self._codes: dict[bytes, _Code] = {}  # by the code's digest, not the code
        self._ended_file = ended_file
        self._ended = _read_ended(ended_file, clock()) if ended_file else {}

    def mint_code(self, who: Principal) -> str:
        """A fresh one-time code standing for `who`'s token."""
        now = self._clock()
        self._codes = {k: c for k, c in self._codes.items() if c.expires > now}
        while len(self._codes) >= _MAX_CODES:
            del self._codes[next(iter(self._codes))]
        if who.via != "token" or who.person:
            # A session stands for a token; a person's identity (the socket's uid, a
            # worker's word, a user token's user) is not one a cookie can carry yet.
            raise Forbidden(
                "the dashboard signs in with a token of no user (an admin token, or a user "
                "token of projects): `job ui` over a Unix socket or as a user's token is not "
                "supported yet"
            )
        found = self.tokens.by_label(who.label)
        if found is None:  # revoked since its request was let in
            raise Forbidden(f"token {who.label!r} has been revoked")
        code = secrets.token_urlsafe(24)
        fingerprint = self._fingerprint(found[0])
        self._codes[_digest(code)] = _Code(who.label, fingerprint, now + CODE_TTL_S)
        return code

    def redeem(self, code: str) -> str | None:
        """The session cookie's value for `code`, which is used up; None when it is
        unknown, used already, expired, or its token revoked since."""
        found = self._codes.pop(_digest(code), None)
        if found is None or found.expires <= self._clock():
            return None
        if self._token_of(found.label, found.fingerprint) is None:
            return None
        expires = int(self._clock() + SESSION_TTL_S)
        payload = {"label": found.label, "fp": found.fingerprint, "exp": expires}
        payload["sid"] = secrets.token_urlsafe(12)  # two sessions never share a signature
        body = _b64(json.dumps(payload, separators=(",", ":")).encode())
        return f"{body}.{_b64(self._sign(body.encode()))}"

    def principal(self, cookie: str | None) -> Principal | None:
        """Whose session `cookie` is, if it is a valid one: signed here, not expired, not
        signed out, and its token still valid."""
        session = self._session(cookie)
        if session is None:
            return None
        label, fingerprint, _expires = session
        return self._token_of(label, fingerprint)

    def end(self, cookie: str | None) -> None:
        """Sign the session of `cookie` out: refused from now on, wherever it is shown."""
        session = self._session(cookie)
        if session is None:
            return
        signature, expires = (cookie or "").rpartition(".")[2], session[2]
        now = self._clock()
        self._ended = {s: e for s, e in self._ended.items() if e > now}
        self._ended[signature] = expires
        if self._ended_file is not None:
            # A full disk: ended here still, though a restart would not know it.
            with contextlib.suppress(OSError):
                _write_ended(self._ended_file, self._ended)

    def _session(self, cookie: str | None) -> tuple[str, str, int] | None:
        """The label, fingerprint and expiry a cookie signed here holds, while it lasts."""
        body, _, signature = (cookie or "").partition(".")
        if not body or not hmac.compare_digest(_b64(self._sign(body.encode())), signature):
            return None
        try:
            payload = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
            label, fingerprint, expires = payload["label"], payload["fp"], payload["exp"]
        except (ValueError, KeyError, TypeError):
            return None
        if not isinstance(expires, int) or expires <= self._clock() or signature in self._ended:
            return None
        return str(label), str(fingerprint), expires

    def _token_of(self, label: str, fingerprint: str) -> Principal | None:
        found = self.tokens.by_label(label)
        if found is None or not hmac.compare_digest(self._fingerprint(found[0]), fingerprint):
            return None
        return found[1]

    def _fingerprint(self, token_digest: bytes) -> str:
        """Which token of a label a session is of, without showing its digest."""
        return self._sign(b"token:" + token_digest).hex()[:32]

    def _sign(self, data: bytes) -> bytes:
        return hmac.new(self._key, data, hashlib.sha256).digest()


def _read_ended(path: Path, now: float) -> dict[str, int]:
    """The sessions signed out that have not expired yet, from `path` (none: no file)."""
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return {}
    ended = {}
    for line in lines:
        signature, _, expires = line.partition(" ")
        if expires.isdigit() and int(expires) > now:
            ended[signature] = int(expires)
    return ended


def _write_ended(path: Path, ended: dict[str, int]) -> None:
    """The whole list, 0600, written aside and renamed over the old one."""
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.writelines(f"{signature} {expires}\n" for signature, expires in ended.items())
    os.replace(tmp, path)


def _digest(code: str) -> bytes:
    return hashlib.sha256(code.encode()).digest()


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
