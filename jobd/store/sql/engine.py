"""The engine and the write path every resource module shares.

One SQLAlchemy engine (a SQLite file or PostgreSQL), its SQLite pragmas, the translation
of drivers' errors into the store's own (store/faults.py), one writer at a time, and the
transaction each write runs in (`_tx`, `batch`). Listeners hear of a commit only after
it, so nothing downstream (watchers, events.jsonl) ever reports a write that could still
roll back. The resources' modules (jobs.py, arrays.py, ...) are mixins over `SQLEngine`.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from jobd.store import schema as t
from jobd.store.base import CommitListener, StoreUnavailable
from jobd.store.faults import describe_store, storage_fault
from jobd.store.sql.delivery import Delivery
from jobd.store.sql.statements import HotStatements, Tx
from jobd.store.sql.storefile import StoreFile, damaged_file, sqlite_path

__all__ = ["SQLEngine", "normalize_url"]


def normalize_url(url: str) -> str:
    """Accept the plain `postgresql://` users write; SQLAlchemy wants the driver named."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


def _set_synchronous(conn: Connection, level: str) -> None:
    info = conn.connection.info
    if info.get("synchronous") != level:
        conn.exec_driver_sql(f"PRAGMA synchronous={level}")
        info["synchronous"] = level


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    # FULL: an acknowledged write survives power loss, not just a crash of the broker.
    cur.execute("PRAGMA synchronous=FULL")  # each transaction may lower it, see _tx
    cur.execute("PRAGMA busy_timeout=10000")
    cur.execute("PRAGMA cache_size=-32768")
    # The broker copies the WAL back into the file off its event loop (SQLStore.checkpoint);
    # a commit does it itself only past 32 MB, for a store used without a broker.
    cur.execute("PRAGMA wal_autocheckpoint=8192")
    cur.close()


class SQLEngine:
    """The engine, its one writer at a time, and the transactions of every write."""

    def __init__(self, url: str) -> None:
        self.url = normalize_url(url)
        self.engine: Engine = self._make_engine(self.url)
        self._delivery = Delivery()
        self._lock = threading.RLock()  # one writer at a time keeps CAS and revisions simple
        self._sqlite = self.url.startswith("sqlite")
        self._hot = HotStatements(self.engine.dialect)
        self._batch: Tx | None = None  # the open transaction of batch(), if any
        self._batch_durable = False
        self.where = describe_store(self.url)
        self._write_error: StoreUnavailable | None = None
        # Every error of a statement SQLAlchemy runs passes here: storage faults leave
        # as the store's own errors (store/faults.py), with where they happened.
        sa.event.listen(self.engine, "handle_error", self._translate)
        self._file = self._open_file()

    def _open_file(self) -> StoreFile | None:
        """A SQLite file, refused if damaged, opened, and remembered (storefile.py)."""
        path = sqlite_path(self.url)
        if path is None:
            return None
        damage = damaged_file(path)
        if damage is not None:
            raise StoreUnavailable(
                f"the store at {path} {damage}: jobd will not open it; "
                "restore it from a copy, or move it away to start an empty store"
            )
        with self.engine.connect():  # creates a new store's file
            pass
        return StoreFile(path)

    @staticmethod
    def _make_engine(url: str) -> Engine:
        if url.startswith("sqlite"):
            path = url.split("///", 1)[-1]
            if path and path != ":memory:":
                Path(path).parent.mkdir(parents=True, exist_ok=True)
            engine = sa.create_engine(url, connect_args={"check_same_thread": False})
            sa.event.listen(engine, "connect", _sqlite_pragmas)
            return engine
        return sa.create_engine(url, pool_pre_ping=True, pool_size=8)

    def _translate(self, context: sa.engine.ExceptionContext) -> None:
        statement = (context.statement or "").lstrip()[:6].upper()
        doing = "read" if statement == "SELECT" else "write"
        failed = context.sqlalchemy_exception or context.original_exception
        fault = storage_fault(failed, self.where, doing)
        if fault is not None:
            raise fault from context.original_exception

    @contextmanager
    def _writing(self, durable: bool) -> Iterator[Connection]:
        """A write transaction whose storage fault is remembered as `write_error`.

        Committed when the block ends; what raises rolls it back. Whether the last write
        succeeded is what /readyz reports, so a success clears the fault.
        """
        try:
            if self._file is not None:
                self._file.check()  # one stat: a deleted or truncated file takes no write
            with self.engine.begin() as conn:
                if self._sqlite:
                    _set_synchronous(conn, "FULL" if durable else "NORMAL")
                yield conn
        except Exception as exc:
            fault = storage_fault(exc, self.where, "write")
            if fault is None:
                raise
            self._write_error = fault
            if fault is exc:
                raise
            raise fault from exc
        self._write_error = None

    def subscribe(self, listener: CommitListener) -> None:
        self._delivery.listeners.append(listener)

    def listen_on_this_thread(self) -> None:
        """Listeners run on the calling thread (the event loop's), whoever writes."""
        self._delivery.live_on_this_thread()

    def revision(self) -> int:
        with self.engine.connect() as conn:
            value = conn.execute(sa.select(t.meta.c.value).where(t.meta.c.key == "revision"))
            return int(value.scalar_one())

    def _rows(self, query: sa.Select[Any]) -> list[Any]:
        with self.engine.connect() as conn:
            return list(conn.execute(query))

    # -- the write path ------------------------------------------------------------------

    @contextmanager
    def _tx(self, durable: bool = False) -> Iterator[Tx]:
        """One transaction; its listeners run after the commit, on the loop (delivery.py).

        `durable` commits survive power loss (SQLite fsyncs the WAL at each such commit).
        The others survive a crash of the broker but may be lost with the machine's power,
        which costs nothing that matters: they record observations (a job started, a
        worker's report) that the reconcile loops and the workers re-derive, and the WAL
        keeps the file consistent either way. What a user was told is accepted — a created
        job — is always durable.
        """
        with self._lock:
            if self._batch is not None:  # inside batch(): its transaction, its commit
                if durable and not self._batch_durable:
                    raise RuntimeError("a durable write inside a batch that is not durable")
                yield self._batch
                return
            with self._writing(durable) as conn:
                tx = Tx(conn, self._hot)
                yield tx
            # Committed: now, and only now, may anyone hear of it, in commit order.
            self._delivery.committed(tx.changes, tx.events)
        self._delivery.deliver()

    @contextmanager
    def batch(self, durable: bool = False) -> Iterator[None]:
        """The writes made inside share one transaction and one commit.

        Listeners hear them all after that commit. A write refused inside (a stale
        resource_version) changes nothing and the batch goes on; anything else that
        escapes rolls the whole batch back. Reads see only what is committed, so a
        caller that writes one object twice passes the returned copy along itself. No
        await inside: another task's writes would join the batch (the lock is the
        thread's, and tasks share the thread).
        """
        with self._tx(durable) as tx:
            self._batch, self._batch_durable = tx, durable
            try:
                yield
            finally:
                self._batch = None
