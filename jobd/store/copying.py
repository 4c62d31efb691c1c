"""A whole store copied into an empty database: what `jobd migrate-store` does.

A lab that outgrows one machine moves its SQLite store to PostgreSQL, where several
brokers can share it. Everything moves as it is stored, row for row: every job (a
running one with its attempt, so the reports of the agents that run it keep being
accepted), array, dependency, project, worker (with its lease epoch), token (its
digest: the tokens in use keep working), event, fair-share usage, the change log (a
watcher resumes from the revision it had), and the counters of `jobd_meta`, so new
revisions, job ids, array ids and event numbers continue past the old ones. Bodies
are copied as the text they are: a field this jobd does not know rides along.

The copy is one transaction on the target, the migrations included (PostgreSQL's DDL
is transactional): a copy that fails or is killed leaves the target as it was. The
source is only read, in one snapshot, and may be at an older schema: the target is
migrated to the source's revision, filled, then migrated to this jobd's newest, as
the source itself would have been. Tables are found by reflection, not from
`schema.py`, so a table a migration adds is copied without a change here.

The target must hold nothing: `TargetNotEmpty` names what it holds.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from jobd.store.faults import describe_store, storage_fault
from jobd.store.in_use import broker_on
from jobd.store.sql.engine import normalize_url
from jobd.store.sql.maintenance import revisions, schema_revision, upgrade
from jobd.store.sql.storefile import sqlite_path

__all__ = ["Copied", "CopyRefused", "SourceInUse", "TargetNotEmpty", "copy_store"]

Progress = Callable[[str], None]
_BATCH = 2000  # rows a statement: few round trips to a distant server, bounded memory
_PROGRESS_EVERY_S = 1.0
_ALEMBIC = "alembic_version"  # the migrations' own: written by upgrade(), never copied
_COUNTERS = "jobd_meta"  # revision, job_id, event_seq, array_id: zeros in a new store
# Tables the migrations fill (the column that tells a row in use, and its unused value):
# the counters at zero, the leader's lease at epoch 0 (nobody has led).
_SEEDED = {_COUNTERS: ("value", 0), "leader_lease": ("epoch", 0)}


class CopyRefused(Exception):
    """The copy was not made, and nothing was written: the sentence says why."""


class TargetNotEmpty(CopyRefused):
    """The target holds rows already (named in the message)."""


class SourceInUse(CopyRefused):
    """A broker still runs on the source (the message says what shows it)."""


@dataclass
class Copied:
    """What a copy moved: rows per table, the schema it ended at, the counters carried."""

    source: str
    target: str
    schema: str  # the target's migration once done (this jobd's newest)
    source_schema: str
    rows: dict[str, int] = field(default_factory=dict)
    counters: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0


def copy_store(
    source_url: str, target_url: str, progress: Progress | None = None, force: bool = False
) -> Copied:
    """Copy the store at `source_url` into the empty database at `target_url`.

    CopyRefused (TargetNotEmpty, SourceInUse) when it may not be done; StoreUnavailable
    when either database cannot be reached. `progress` hears a line now and then on a
    long copy. `force`: copy although a PostgreSQL source's lease says a broker leads.
    """
    say = progress or (lambda _line: None)
    _refuse_unusable(source_url, "--from")
    _refuse_unusable(target_url, "--to")
    where, to = describe_store(source_url), describe_store(target_url)  # as the user said
    source_url, target_url = normalize_url(source_url), normalize_url(target_url)
    _refuse_same(source_url, target_url)
    _refuse_missing_file(source_url)
    _refuse_live_source(source_url, where, force, say)
    started = time.monotonic()
    source, target = _snapshot_engine(source_url), _engine(target_url)
    try:
        with _opened(source, where) as read, read.begin():  # one snapshot of the source
            revision = _source_revision(read, where)
            with _opened(target, to) as write, write.begin():  # all of it, or nothing
                _refuse_non_empty(write, to, revision)
                copied = Copied(where, to, revisions()[-1], revision)
                _fill(read, write, copied, say)
    finally:
        source.dispose()
        target.dispose()
    copied.seconds = time.monotonic() - started
    return copied


def _fill(read: Connection, write: Connection, copied: Copied, say: Progress) -> None:
    """The target migrated to the source's schema, filled, then migrated to the newest."""
    upgrade(write, copied.source_schema)
    for name in _tables(read):
        copied.rows[name] = _copy_table(read, write, name, say)
    _continue_sequences(write)
    upgrade(write, "head")
    copied.counters = _counters(write)


@contextmanager
def _opened(engine: Engine, where: str) -> Iterator[Connection]:
    """A connection; a database that cannot be reached, or fails while used, raises the
    store's own error saying where (store/faults.py)."""
    try:
        with engine.connect() as conn:
            yield conn
    except sa.exc.SQLAlchemyError as exc:
        fault = storage_fault(exc, where, "copy")
        if fault is None:
            raise
        raise fault from exc


def _refuse_unusable(url: str, flag: str) -> None:
    """CopyRefused naming the flag, for what is no URL of a database jobd can use."""
    try:
        backend = sa.make_url(url).get_backend_name()
    except sa.exc.ArgumentError:
        backend = ""
    if backend not in ("sqlite", "postgresql", "postgres"):
        raise CopyRefused(
            f"{flag}: {url!r} is not a store's URL (sqlite:///PATH or postgresql://...)"
        )


def _refuse_same(source_url: str, target_url: str) -> None:
    if sa.make_url(source_url) == sa.make_url(target_url):
        raise CopyRefused("--from and --to name the same store: give another database to --to")


def _refuse_missing_file(url: str) -> None:
    """A SQLite source that is no file: opening it would make an empty store."""
    path = sqlite_path(url)
    if path is not None and not path.is_file():
        raise CopyRefused(f"there is no store at {path} (--from names no file)")


def _refuse_live_source(url: str, where: str, force: bool, say: Progress) -> None:
    """A broker running on the source writes what the copy would miss (store/in_use.py).
    `force` passes over a PostgreSQL lease (its broker may have died less than a lease
    ago), never a SQLite file a process holds open."""
    said = broker_on(url, where)
    if said is None:
        return
    sqlite = sqlite_path(url) is not None
    if force and not sqlite:
        say(f"--force: copying although {said}")
        return
    again = "" if sqlite else ", or give --force if that broker is gone"
    raise SourceInUse(f"{said}; stop it first (its workers and jobs keep running){again}")


def _engine(url: str) -> Engine:
    return sa.create_engine(url, poolclass=sa.pool.NullPool)


def _snapshot_engine(url: str) -> Engine:
    """An engine whose transaction reads one snapshot of the store, whoever writes.

    PostgreSQL: REPEATABLE READ. SQLite: Python's driver opens no transaction for a
    read, so each statement would see its own state; the transaction is begun here,
    as SQLAlchemy's documentation says to (and busy waits as the broker's do).
    """
    if sqlite_path(url) is None:
        return sa.create_engine(url, poolclass=sa.pool.NullPool, isolation_level="REPEATABLE READ")
    engine = _engine(url)

    @sa.event.listens_for(engine, "connect")
    def _no_driver_transactions(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None
        dbapi_conn.execute("PRAGMA busy_timeout=10000")

    @sa.event.listens_for(engine, "begin")
    def _begin(conn: Connection) -> None:
        conn.exec_driver_sql("BEGIN")

    return engine


def _source_revision(read: Connection, where: str) -> str:
    revision = schema_revision(read)
    if revision is None:
        raise CopyRefused(f"{where} is not a jobd store (it has no schema version)")
    if revision not in revisions():
        raise CopyRefused(
            f"{where} is at schema {revision}, which this jobd does not know (its newest is "
            f"{revisions()[-1]}): copy it with the jobd that wrote it"
        )
    return revision


def _refuse_non_empty(write: Connection, to: str, source_revision: str) -> None:
    """TargetNotEmpty naming each table with rows (and counters past zero); CopyRefused
    for a schema the source's cannot be migrated to."""
    held = []
    for name in sorted(sa.inspect(write).get_table_names()):
        if name == _ALEMBIC:
            continue
        table = sa.table(name)
        count = int(write.execute(sa.select(sa.func.count()).select_from(table)).scalar_one())
        if name in _SEEDED:  # rows a migration put there count once they moved on
            column, unused = _SEEDED[name]
            moved = sa.select(sa.func.count()).select_from(table).where(sa.column(column) > unused)
            count = int(write.execute(moved).scalar_one())
        if count:
            held.append(f"{name} ({count} row{'s' if count != 1 else ''})")
    if held:
        raise TargetNotEmpty(
            f"the target {to} is not empty: {', '.join(held)}; "
            "jobd moves a store only into an empty database"
        )
    target_revision = schema_revision(write)
    order = revisions()
    if target_revision is not None and (
        target_revision not in order or order.index(target_revision) > order.index(source_revision)
    ):
        raise CopyRefused(
            f"the target {to} has jobd's schema {target_revision}, newer than the source's "
            f"({source_revision}): give a database without tables"
        )


def _tables(read: Connection) -> list[str]:
    return sorted(n for n in sa.inspect(read).get_table_names() if n != _ALEMBIC)


def _copy_table(read: Connection, write: Connection, name: str, say: Progress) -> int:
    """Every row of `name`, in batches; the counters replace the new store's zeros."""
    source = sa.Table(name, sa.MetaData(), autoload_with=read)
    target = sa.Table(name, sa.MetaData(), autoload_with=write)
    columns = [c.name for c in source.columns if c.name in target.columns]
    if name in _SEEDED:  # the migrations' rows give way to the source's
        write.execute(target.delete())
    total = int(read.execute(sa.select(sa.func.count()).select_from(source)).scalar_one())
    done, said_at = 0, time.monotonic()
    order = list(source.primary_key.columns) or list(source.columns)
    rows = read.execute(sa.select(*(source.c[c] for c in columns)).order_by(*order))
    while batch := rows.fetchmany(_BATCH):
        write.execute(target.insert(), [dict(zip(columns, row, strict=True)) for row in batch])
        done += len(batch)
        if time.monotonic() - said_at >= _PROGRESS_EVERY_S:
            say(f"{name}: {done}/{total} rows")
            said_at = time.monotonic()
    say(f"{name}: {done} rows copied")
    return done


def _continue_sequences(write: Connection) -> None:
    """PostgreSQL's serial columns (jobs.id, events.seq) counted on past the copied rows.

    jobd numbers rows from its counters, not from these sequences; they are set anyway,
    so that nothing that ever inserts without an id can collide with a copied row.
    """
    if write.dialect.name != "postgresql":
        return
    inspector = sa.inspect(write)
    for name in inspector.get_table_names():
        for column in inspector.get_pk_constraint(name)["constrained_columns"]:
            sequence = write.execute(
                sa.select(sa.func.pg_get_serial_sequence(name, column))
            ).scalar_one()
            if sequence is None:
                continue
            top: Any = sa.select(sa.func.max(sa.column(column))).select_from(sa.table(name))
            highest: Any = write.execute(top).scalar_one()
            if highest is not None:
                write.execute(sa.select(sa.func.setval(sequence, highest)))


def _counters(write: Connection) -> dict[str, int]:
    table = sa.table(_COUNTERS, sa.column("key"), sa.column("value"))
    rows: list[Any] = list(write.execute(sa.select(table.c.key, table.c.value)))
    return {str(key): int(value) for key, value in rows}
