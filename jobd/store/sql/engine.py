"""The engine and the write path every resource module shares.

One SQLAlchemy engine (a SQLite file or PostgreSQL), its SQLite pragmas, the translation
of drivers' errors into the store's own (store/faults.py), one writer at a time, and the
transaction each write runs in (`_tx`, `batch`). Listeners hear of a commit only after
it, so nothing downstream (watchers, events.jsonl) ever reports a write that could still
roll back. The resources' modules (jobs.py, arrays.py, ...) are mixins over `SQLEngine`.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from jobd.store import schema as t
from jobd.store.base import Change, CommitListener, EventRecord, NotLeader, StoreUnavailable
from jobd.store.faults import describe_store, storage_fault
from jobd.store.sql.delivery import Delivery
from jobd.store.sql.rowsets import HELD_ROW_MOVED
from jobd.store.sql.statements import HotStatements, Tx
from jobd.store.sql.storefile import StoreFile, damaged_file, sqlite_path

__all__ = ["PING_AFTER_IDLE_S", "SQLEngine", "normalize_url", "ping_when_idle"]


def normalize_url(url: str) -> str:
    """Accept the plain `postgresql://` users write; SQLAlchemy wants the driver named.

    Several hosts, as libpq writes them (`postgresql://u@a:5432,b:5433/db`), are
    handed on in SQLAlchemy's form for them (`?host=a:5432&host=b:5433`), which reads
    no port from a list; the driver gets them all, with `target_session_attrs` and the
    rest of the query as they were written.
    """
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            url = "postgresql+psycopg://" + url[len(prefix) :]
    if url.startswith("postgresql"):
        return _hosts_in_query(url)
    return url


def _hosts_in_query(url: str) -> str:
    """`scheme://user@a:1,b:2/db?q` as `scheme://user@/db?host=a:1&host=b:2&q`; any other
    URL as it is (one host; several without ports, which SQLAlchemy passes as they are)."""
    scheme, _, rest = url.partition("://")
    split = min((i for i in (rest.find("/"), rest.find("?")) if i >= 0), default=len(rest))
    netloc, tail = rest[:split], rest[split:]
    user, at, hosts = netloc.rpartition("@")
    if "," not in hosts or ":" not in hosts:
        return url
    path, _, query = tail.partition("?")
    given = "&".join(f"host={host}" for host in hosts.split(",") if host)
    return f"{scheme}://{user}{at}{path or '/'}?{given}" + (f"&{query}" if query else "")


# A pooled PostgreSQL connection idle longer than this is asked `SELECT 1` before use.
PING_AFTER_IDLE_S = 1.0


def ping_when_idle(engine: Engine, idle_s: float) -> None:
    """Check a pooled connection before use only when it has been idle `idle_s` or more.

    SQLAlchemy's `pool_pre_ping` asks on every checkout: a round trip before each
    statement or transaction of a busy broker. A server restarted, or a connection
    dropped by it, shows on a connection that sat idle; one in steady use that breaks
    fails its statement once, and the pool replaces every connection of its time.
    A failed ping raises DisconnectionError, on which the pool opens a new connection.
    """

    def checkin(_dbapi: Any, record: Any) -> None:
        record.info["idle_since"] = time.monotonic()

    def checkout(dbapi: Any, record: Any, _proxy: Any) -> None:
        since = record.info.get("idle_since")
        if since is None or time.monotonic() - since < idle_s:
            return
        try:
            cursor = dbapi.cursor()
            cursor.execute("SELECT 1")
            cursor.close()
            dbapi.rollback()
        except Exception as exc:  # any failure of the ping: the connection is not to be used
            raise sa.exc.DisconnectionError(str(exc)) from exc

    sa.event.listen(engine, "checkin", checkin)
    sa.event.listen(engine, "checkout", checkout)


def _set_synchronous(conn: Connection, level: str) -> None:
    info = conn.connection.info
    if info.get("synchronous") != level:
        conn.exec_driver_sql(f"PRAGMA synchronous={level}")
        info["synchronous"] = level


def _set_synchronous_commit(conn: Connection, level: str) -> None:
    """PostgreSQL's counterpart of SQLite's synchronous level, per session, set only when
    the pooled connection's differs: `off` commits without waiting for the WAL's flush.

    What is lost to a crash of the server or the machine is then the last moment of
    commits (at most three times `wal_writer_delay`), never consistency; a crash of the
    broker loses nothing: the same promise as SQLite's NORMAL (see `_tx`). The SET is
    undone with its transaction if that rolls back, so the level is remembered only
    after the commit (`_writing`), and forgotten until then.
    """
    info = conn.connection.info
    if info.get("synchronous_commit") != level:
        info.pop("synchronous_commit", None)
        conn.exec_driver_sql(f"SET synchronous_commit = {level}")


def _end_transaction(conn: Connection, tx: Tx) -> None:
    """A PostgreSQL transaction's flush (one statement per table, rowsets.py), its fence
    and its COMMIT.

    Not in psycopg's pipeline mode, which would send them in one round trip: its Python
    holds the GIL for longer stretches than the waits it saves, and the broker's loop
    (`/healthz`) waited for it; in alternating bench pairs, leaving the flush out of the
    pipeline lowered `/healthz` p99 in each (docs/performance.md). A statement that fails
    leaves the transaction open in error: it is rolled back here, before SQLAlchemy
    returns the connection to its pool.
    """
    raw = conn.connection.dbapi_connection
    assert raw is not None
    try:
        tx.flush()
        tx.check_epoch()
        conn.commit()
    except Exception as exc:
        with contextlib.suppress(Exception):  # a connection gone takes its transaction
            raw.rollback()
        if getattr(getattr(exc, "orig", exc), "sqlstate", None) == HELD_ROW_MOVED:
            raise RuntimeError("a job this transaction holds changed under it") from exc
        raise


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
        self._read_engine = (
            self.engine
            if self.url.startswith("sqlite")
            else self.engine.execution_options(isolation_level="AUTOCOMMIT")
        )
        self._delivery = Delivery()
        self._lock = threading.RLock()  # one writer at a time keeps CAS and revisions simple
        self._sqlite = self.url.startswith("sqlite")
        self._hot = HotStatements(self.engine.dialect)
        self._batch: Tx | None = None  # the open transaction of batch(), if any
        self._batch_durable = False
        self.where = describe_store(self.url)
        self._write_error: StoreUnavailable | None = None
        self._epoch: int | None = None  # the leader's fence (fence()); None: unfenced
        self._fenced_out: Callable[[int], None] | None = None
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
        engine = sa.create_engine(url, pool_size=8)
        ping_when_idle(engine, PING_AFTER_IDLE_S)
        return engine

    @property
    def reads(self) -> Engine:
        """The engine for reads: on PostgreSQL each statement its own transaction.

        A read in a transaction of its own costs a BEGIN and a ROLLBACK, two more round
        trips to the server than the statement itself; under PostgreSQL's READ
        COMMITTED each statement sees its own snapshot either way. SQLite's driver
        opens no transaction for a read: its engine is used as it is.
        """
        return self._read_engine

    def _translate(self, context: sa.engine.ExceptionContext) -> None:
        statement = (context.statement or "").lstrip()[:6].upper()
        doing = "read" if statement == "SELECT" else "write"
        failed = context.sqlalchemy_exception or context.original_exception
        fault = storage_fault(failed, self.where, doing)
        if fault is not None:
            raise fault from context.original_exception

    @contextmanager
    def _writing(self, durable: bool) -> Iterator[Tx]:
        """A write transaction whose storage fault is remembered as `write_error`.

        Committed when the block ends; what raises rolls it back. Whether the last write
        succeeded is what /readyz reports, so a success clears the fault. A fenced store
        checks the leader's epoch in the transaction before it commits (`Tx.check_epoch`,
        free when a counter's reservation checked it already); a refusal is no storage
        fault: it leaves `write_error` alone and tells `on_fenced_out`'s callback.
        """
        epoch = self._epoch
        if epoch == 0:
            raise NotLeader("this broker does not lead: it takes no writes")
        try:
            if self._file is not None:
                self._file.check()  # one stat: a deleted or truncated file takes no write
            level = "on" if durable else "off"
            with self.engine.begin() as conn:
                info = conn.connection.info
                if self._sqlite:
                    _set_synchronous(conn, "FULL" if durable else "NORMAL")
                else:
                    _set_synchronous_commit(conn, level)
                tx = Tx(conn, self._hot, epoch)
                yield tx
                if self._sqlite:
                    tx.flush()
                    tx.check_epoch()
                else:
                    _end_transaction(conn, tx)
            if not self._sqlite:  # committed, the SET with it: the session's level now
                info["synchronous_commit"] = level
        except NotLeader:
            if epoch is not None and self._fenced_out is not None:
                self._fenced_out(epoch)
            raise
        except Exception as exc:
            fault = storage_fault(exc, self.where, "write")
            if fault is None:
                raise
            self._write_error = fault
            if fault is exc:
                raise
            raise fault from exc
        self._write_error = None

    def fence(self, epoch: int | None) -> None:
        """None: every write taken; 0: none (a standby); N: only while epoch N leads.

        A new role starts with no write fault: a standby writes nothing, so the last
        write's outcome (`write_error`, /readyz) would otherwise stay whatever failed as it
        stepped down (a paused leader's transaction the server ended), for good; whether
        the store answers is still asked of it (`ping`).
        """
        if epoch != self._epoch:
            self._write_error = None
        self._epoch = epoch

    def on_fenced_out(self, callback: Callable[[int], None]) -> None:
        self._fenced_out = callback

    def end_idle_transactions(self, after_s: float) -> None:
        """PostgreSQL ends a session of this store idle inside a transaction past `after_s`.

        A leader paused (SIGSTOP, a frozen VM) in the middle of a write transaction holds
        the lease row's fence until that transaction ends; the server ending it lets the
        next election go on. Applies to connections opened from now on: the pool's are
        closed.
        """
        if self._sqlite:
            return
        ms = max(int(after_s * 1000), 100)

        def on_connect(dbapi_conn: Any, _record: Any) -> None:
            cursor = dbapi_conn.cursor()
            cursor.execute(f"SET idle_in_transaction_session_timeout = {ms}")
            cursor.close()
            dbapi_conn.commit()

        sa.event.listen(self.engine, "connect", on_connect)
        self.engine.dispose()

    def subscribe(self, listener: CommitListener) -> None:
        self._delivery.listeners.append(listener)

    def listen_on_this_thread(self) -> None:
        """Listeners run on the calling thread (the event loop's), whoever writes."""
        self._delivery.live_on_this_thread()

    def revision(self) -> int:
        with self.reads.connect() as conn:
            value = conn.execute(sa.select(t.meta.c.value).where(t.meta.c.key == "revision"))
            return int(value.scalar_one())

    def _rows(self, query: sa.Select[Any]) -> list[Any]:
        with self.reads.connect() as conn:
            return list(conn.execute(query))

    # -- the write path ------------------------------------------------------------------

    @contextmanager
    def _tx(self, durable: bool = False) -> Iterator[Tx]:
        """One transaction; its listeners run after the commit, on the loop (delivery.py).

        `durable` commits survive power loss (SQLite fsyncs the WAL at each such commit;
        PostgreSQL waits for its WAL's flush, `synchronous_commit`). The others survive
        a crash of the broker but may be lost with the machine's power (or, on
        PostgreSQL, a crash of the server),
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
            with self._writing(durable) as tx:
                yield tx
            # Committed: now, and only now, may anyone hear of it, in commit order.
            self._queue_commit(tx.changes, tx.events)
        self._delivery.deliver()

    def _queue_commit(self, changes: list[Change], events: list[EventRecord]) -> None:
        """Queue a commit of this store's for its listeners; under the write lock.

        store/sql/follow.py adds what other brokers committed before it, when it follows.
        """
        self._delivery.committed(changes, events)

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
