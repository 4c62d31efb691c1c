"""What a failing database becomes: `StorageFull` or `StoreUnavailable`, saying where.

The one place that reads the drivers' errors. SQLite says "database or disk is full"
(SQLITE_FULL) when a write cannot grow the file or its write-ahead log, and an I/O error
(SQLITE_IOERR) or "readonly" for some of the same troubles; PostgreSQL has SQLSTATE
53100 (disk_full) and class 58 (I/O); an unreachable PostgreSQL is an OperationalError
with no SQLSTATE. SQLAlchemy wraps them (`.orig`), except on the hot statements that
run on the driver's own cursor, so both shapes are read. Anything not recognised here is
a bug, not a fault of the storage, and is left as it is (a 500 with its traceback logged).
"""

from __future__ import annotations

import sqlite3

import sqlalchemy as sa
from sqlalchemy.engine import make_url

from jobd.store.base import StorageFull, StoreUnavailable

__all__ = ["describe_store", "storage_fault"]

# SQLite's primary result codes (the low byte of an extended code).
_SQLITE_WRITE_FAILED = {8: "READONLY", 10: "IOERR", 13: "FULL"}
_SQLITE_UNREACHABLE = {5: "BUSY", 6: "LOCKED", 11: "CORRUPT", 14: "CANTOPEN", 26: "NOTADB"}
_SQLITE_DAMAGED = {11, 26}  # CORRUPT, NOTADB: the file, not its disk or its lock
_FULL_TEXT = ("database or disk is full", "disk i/o error", "readonly database")


def describe_store(url: str) -> str:
    """Where the store is, for a message: the SQLite file, or the server without password."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        return parsed.database or ":memory:"
    return parsed.render_as_string(hide_password=True)


def storage_fault(exc: BaseException, where: str, doing: str) -> StoreUnavailable | None:
    """The store's own error for a driver's `exc`, or None when it is no storage fault.

    `doing` completes "could not ...": "write", "read", "copy its log back".
    """
    if isinstance(exc, StoreUnavailable):
        return exc
    orig = exc.orig if isinstance(exc, sa.exc.DBAPIError) and exc.orig is not None else exc
    kind = _kind(exc, orig)
    if kind is None:
        return None
    reason = (str(orig).strip().splitlines() or [type(orig).__name__])[0]
    if _sqlite_code(orig) in _SQLITE_DAMAGED:
        return kind(f"the store at {where} is damaged: {reason}")
    if kind is StoreUnavailable and doing != "read":
        doing = "be reached"
    return kind(f"the store at {where} could not {doing}: {reason}")


def _kind(exc: BaseException, orig: BaseException) -> type[StoreUnavailable] | None:
    if isinstance(orig, sqlite3.IntegrityError):
        return None
    if isinstance(orig, sqlite3.Error):
        return _sqlite_kind(orig)
    sqlstate = getattr(orig, "sqlstate", None)
    if isinstance(sqlstate, str):
        return _postgres_kind(sqlstate)
    if isinstance(exc, sa.exc.OperationalError | sa.exc.InterfaceError | sa.exc.TimeoutError):
        return StoreUnavailable  # e.g. a server that refuses connections (no SQLSTATE)
    if isinstance(orig, OSError):
        return StoreUnavailable
    return None


def _sqlite_code(err: BaseException) -> int | None:
    """SQLite's primary result code of `err`, if it is SQLite's and has one."""
    code = getattr(err, "sqlite_errorcode", None)
    return code & 0xFF if isinstance(err, sqlite3.Error) and isinstance(code, int) else None


def _sqlite_kind(err: sqlite3.Error) -> type[StoreUnavailable] | None:
    code = _sqlite_code(err)
    if code is not None:
        if code in _SQLITE_WRITE_FAILED:
            return StorageFull
        if code in _SQLITE_UNREACHABLE:
            return StoreUnavailable
    text = str(err).lower()
    if any(part in text for part in _FULL_TEXT):
        return StorageFull
    if "unable to open" in text or "database is locked" in text:
        return StoreUnavailable
    return None


def _postgres_kind(sqlstate: str) -> type[StoreUnavailable] | None:
    if sqlstate == "53100" or sqlstate.startswith("58") or sqlstate == "25006":
        return StorageFull  # disk_full; system/I-O errors; a read-only transaction
    if sqlstate[:2] in ("08", "53", "57"):
        return StoreUnavailable  # connection, insufficient resources, operator intervention
    return None
