"""Keeping the store itself: its schema's migrations, the health checks, the WAL's copy.

What the broker asks of the database as such, not of any resource: bring the schema up
to date, answer a ping, learn whether writes work again (probe_write), and copy SQLite's
write-ahead log back into the file from a thread (checkpoint).
"""

from __future__ import annotations

import os
from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from jobd.store import schema as t
from jobd.store.base import StorageFull, StoreUnavailable
from jobd.store.sql.engine import SQLEngine

__all__ = [
    "PROBE_FREE_BYTES",
    "SQLMaintenance",
    "head_revision",
    "revisions",
    "schema_revision",
    "upgrade",
]

# What a SQLite store's disk must have free for probe_write to call it writable again.
PROBE_FREE_BYTES = 256 * 1024
_MIGRATIONS = Path(__file__).parent.parent / "migrations"


def _config() -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(_MIGRATIONS))
    return cfg


def upgrade(conn: sa.Connection, revision: str = "head") -> None:
    """Bring the schema on `conn` up to `revision`, inside the transaction `conn` is in."""
    cfg = _config()
    cfg.attributes["connection"] = conn
    command.upgrade(cfg, revision)


def schema_revision(conn: sa.Connection) -> str | None:
    """The migration the schema on `conn` is at; None for a database jobd never migrated."""
    return MigrationContext.configure(conn).get_current_revision()


def revisions() -> list[str]:
    """This jobd's migrations, oldest first: a schema's age is its place here."""
    script = ScriptDirectory.from_config(_config())
    return [r.revision for r in reversed(list(script.walk_revisions()))]


def head_revision() -> str:
    """The newest migration this jobd has."""
    return revisions()[-1]


class SQLMaintenance(SQLEngine):
    """Migrations, ping, probe_write, checkpoint, close."""

    def migrate(self, revision: str = "head") -> None:
        """Bring the schema up to `revision` (the newest unless told)."""
        with self.engine.begin() as conn:
            upgrade(conn, revision)

    def close(self) -> None:
        self.engine.dispose()
        if self._file is not None:
            self._file.after_close()

    def checkpoint(self) -> None:
        """Copy SQLite's write-ahead log back into the database file; nothing elsewhere.

        Safe from another thread while writers go on (a passive checkpoint waits for
        nobody), and the GIL is released while SQLite works: the broker calls this from
        a thread, so a commit no longer pays for the copy of the pages before it.
        """
        if self._sqlite:
            self._check_file()
            with self.engine.connect() as conn:
                conn.exec_driver_sql("PRAGMA wal_checkpoint(PASSIVE)")
            self._check_file()

    def _check_file(self) -> None:
        """The file still the one opened, and whole: else writes fail from now on."""
        if self._file is None:
            return
        try:
            self._file.check()
        except StoreUnavailable as exc:
            self._write_error = exc  # /readyz fails now, not only at the next write
            raise

    def ping(self) -> bool:
        try:
            with self.engine.connect() as conn:
                conn.execute(sa.text("SELECT 1"))
            return True
        except (sa.exc.SQLAlchemyError, StoreUnavailable):
            return False

    @property
    def write_error(self) -> StoreUnavailable | None:
        return self._write_error

    def probe_write(self) -> None:
        """Rewrite one row as it is, durably; with SQLite, also ask for room on the disk.

        SQLite reuses the space of its write-ahead log, so a one-row write succeeds on a
        full disk while a submit fails: a SQLite store also needs PROBE_FREE_BYTES free
        on its file system to count as writable. The next failing write sets
        `write_error` again in any case.
        """
        with self._lock, self._writing(durable=True) as tx:
            conn = tx.conn
            conn.execute(
                sa.update(t.meta).where(t.meta.c.key == "revision").values(value=t.meta.c.value)
            )
            self._check_room()

    def _check_room(self) -> None:
        path = self.url.split("///", 1)[-1] if self._sqlite else ""
        if not path or path == ":memory:":
            return
        fs = os.statvfs(Path(path).parent)
        free = fs.f_bavail * fs.f_frsize
        if free < PROBE_FREE_BYTES:
            raise StorageFull(
                f"the store at {self.where} could not write: {free} bytes free on its disk"
            )
