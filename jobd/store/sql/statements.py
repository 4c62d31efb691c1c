"""The transaction a write runs in, and the statements every job's life runs in it.

`Tx` is one open transaction: it reserves revisions and ids, appends to the change
feed and the events table, and keeps what it wrote for the listeners to hear after the
commit (engine.py). A transaction of many writes (a worker's batch of reports, a
scheduling pass) pays for its counters and its appends once, not once a write: a
counter is taken from the store at its first reservation and counted on in memory (the
row stays locked by the transaction), and the change feed's and events' rows are
written together when it ends (`flush`). `HotStatements` are the writes a job makes a
dozen times in its life, compiled once per dialect and run on the driver's own cursor.

On PostgreSQL a transaction also waits for as few round trips as it can: its counters are
locked together, the jobs a batch will swap are locked in one statement (`hold_jobs`) and
checked here, the BEGIN and those locks ride with the next statement sent, and the flush
goes as one statement per table (rowsets.py) before the COMMIT (engine.py).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError
from sqlalchemy.sql.elements import ClauseElement

from jobd.api.models import Job, Phase, Resource
from jobd.api.secrets import holds_secrets, mask_job, patterns_of
from jobd.store import schema as t
from jobd.store.base import Change, EventRecord, Kind, NotLeader, Op
from jobd.store.sql.rowsets import RowSet, RowSets

__all__ = ["Compiled", "HotStatements", "Tx", "rfc3339", "to_json"]

_UPDATE_JOB = sa.update(t.jobs).where(
    t.jobs.c.id == sa.bindparam("b_id"),
    t.jobs.c.resource_version == sa.bindparam("expected_rv"),
)
# The flag's test as the partial index ix_changes_secret says it (schema.py).
_SECRET_CHANGES = sa.select(t.changes.c.revision, t.changes.c.body).where(
    t.changes.c.secret == sa.true(),
    t.changes.c.key == sa.bindparam("key"),
    t.changes.c.kind == "Job",
)
_SCRUB_CHANGE = (
    sa.update(t.changes)
    .where(t.changes.c.revision == sa.bindparam("b_rev"))
    .values(body=sa.bindparam("b_body"), secret=False)
)
_QUEUE_FIRST = (
    sa.select(t.jobs.c.body)
    .where(
        t.jobs.c.phase == Phase.PENDING.value,
        t.jobs.c.ready == sa.true(),
        t.jobs.c.slots <= sa.bindparam("slots"),
        t.jobs.c.gpus <= sa.bindparam("gpus"),
        t.jobs.c.millicpus <= sa.bindparam("millicpus"),
        t.jobs.c.memory <= sa.bindparam("memory"),
    )
    .order_by(t.jobs.c.priority.desc(), t.jobs.c.id)
    .limit(sa.bindparam("limit"))
)
_QUEUE_AFTER = _QUEUE_FIRST.where(
    sa.or_(
        t.jobs.c.priority < sa.bindparam("prio"),
        sa.and_(t.jobs.c.priority == sa.bindparam("prio"), t.jobs.c.id > sa.bindparam("last_id")),
    )
)
# One project's queue (fair share reads each queued project's head: scheduler.py).
_QUEUE_FIRST_OF = _QUEUE_FIRST.where(t.jobs.c.project == sa.bindparam("project"))
_QUEUE_AFTER_OF = _QUEUE_AFTER.where(t.jobs.c.project == sa.bindparam("project"))
# The jobs a transaction is about to swap, locked at once, with the version each row holds.
_HOLD_JOBS = (
    sa.select(t.jobs.c.id, t.jobs.c.resource_version)
    .where(t.jobs.c.id == sa.any_(sa.bindparam("ids")))
    .order_by(t.jobs.c.id)
    .with_for_update()
)
# A PostgreSQL connection whose transaction's BEGIN is not sent yet (psycopg's IDLE).
_NOT_BEGUN = 0
_NEXT = (
    sa.update(t.meta)
    .where(t.meta.c.key == sa.bindparam("counter"))
    .values(value=t.meta.c.value + sa.bindparam("n"))
    .returning(t.meta.c.value)
)
# The leader's fence (Temporal's range_id): a write transaction of the leader holds the
# lease row, shared, while its epoch is still the row's. An election's UPDATE of the row
# then waits for that transaction to end, and one that starts after the election finds
# no such row: no write of an older epoch can commit after a newer epoch was taken.
_EPOCH_HELD = (
    sa.select(t.leader_lease.c.id)
    .where(t.leader_lease.c.id == 1, t.leader_lease.c.epoch == sa.bindparam("epoch"))
    .with_for_update(read=True)
)
# The counter's bump and the fence in one statement: no round trip of its own.
_NEXT_FENCED = _NEXT.where(sa.exists(_EPOCH_HELD))
# PostgreSQL: the counters a transaction takes, locked at its first reservation in one
# statement with the fence; what it reserves is counted in memory and written at the flush.
_HOLD_COUNTERS = (
    sa.select(t.meta.c.key, t.meta.c.value)
    .where(t.meta.c.key == sa.any_(sa.bindparam("keys")))
    .with_for_update(of=t.meta)
)
_HOLD_COUNTERS_FENCED = _HOLD_COUNTERS.where(sa.exists(_EPOCH_HELD))
# Taken together: nearly every write takes a revision, and most of them events.
_COUNTERS_TOGETHER = ("revision", "event_seq")
_SET_COUNTER = (
    sa.update(t.meta)
    .where(t.meta.c.key == sa.bindparam("counter"))
    .values(value=sa.bindparam("b_value"))
)


class Compiled:
    """A statement compiled once for one dialect, to run on the driver's own cursor."""

    def __init__(
        self, statement: ClauseElement, dialect: sa.Dialect, columns: Sequence[str] = ()
    ) -> None:
        # `columns`: what an INSERT or UPDATE sets (else every column of its table).
        compiled = statement.compile(dialect=dialect, column_keys=list(columns) or None)
        self.sql = compiled.string
        # The parameters' order for positional drivers (SQLite); None for named ones.
        self._order: Sequence[str] | None = getattr(compiled, "positiontup", None)
        # Values the statement carries itself (literals SQLAlchemy binds, an OFFSET 0).
        names: dict[sa.BindParameter[Any], str] = getattr(compiled, "bind_names", {})
        self._fixed = {
            name: bind.value
            for bind, name in names.items()
            if not bind.required and bind.value is not None
        }
        # A row's values in that order, picked in C; itemgetter of one name gives no tuple.
        order = self._order
        self._pick: Callable[[dict[str, Any]], Any] | None = None
        if order is not None and len(order) > 1:
            self._pick = operator.itemgetter(*order)

    def params(self, row: dict[str, Any]) -> Any:
        if self._fixed:
            row = self._fixed | row
        if self._order is None:
            return row
        if self._pick is not None:
            return self._pick(row)
        return tuple(row[name] for name in self._order)

    def params_many(self, rows: Sequence[dict[str, Any]]) -> list[Any]:
        if self._fixed or self._pick is None:
            return [self.params(row) for row in rows]
        return list(map(self._pick, rows))


class HotStatements:
    """The writes every job makes, run without SQLAlchemy's per-execution work.

    Compiling, caching and result handling cost SQLAlchemy 40-80 µs a statement, more
    than SQLite takes to run one; a job's life is a dozen of these writes. Everything
    else (reads, schema, migrations, the rarer writes) goes through SQLAlchemy as usual.
    The parameters are ints, strings and booleans, which both drivers take as they are.
    """

    def __init__(self, dialect: sa.Dialect) -> None:
        self.reserve = Compiled(_NEXT, dialect)
        self.reserve_fenced = Compiled(_NEXT_FENCED, dialect)
        self.epoch_held = Compiled(_EPOCH_HELD, dialect)
        self.set_counter = Compiled(_SET_COUNTER, dialect)
        job_columns = [c.name for c in t.jobs.columns if c.name != "id"]
        self.update_job = Compiled(_UPDATE_JOB, dialect, job_columns)
        self.insert_job = Compiled(t.jobs.insert(), dialect)
        self.insert_change = Compiled(t.changes.insert(), dialect)
        self.insert_event = Compiled(t.events.insert(), dialect)
        self.queue_first = Compiled(_QUEUE_FIRST, dialect)
        self.queue_after = Compiled(_QUEUE_AFTER, dialect)
        self.queue_first_of = Compiled(_QUEUE_FIRST_OF, dialect)
        self.queue_after_of = Compiled(_QUEUE_AFTER_OF, dialect)
        # On PostgreSQL the flush writes each table's rows as one statement (rowsets.py),
        # and a batch locks the jobs it will swap as it reads them (`Tx.hold_jobs`).
        self.rowsets: RowSets | None = None
        if dialect.name == "postgresql":
            self.rowsets = RowSets(dialect)
            self.hold_jobs = Compiled(_HOLD_JOBS, dialect)
            self.hold_counters = Compiled(_HOLD_COUNTERS, dialect)
            self.hold_counters_fenced = Compiled(_HOLD_COUNTERS_FENCED, dialect)
            queues = (_QUEUE_FIRST, _QUEUE_AFTER, _QUEUE_FIRST_OF, _QUEUE_AFTER_OF)
            locked = [Compiled(q.with_for_update(), dialect) for q in queues]
            self.queue_held: dict[Compiled, Compiled] = dict(
                zip(
                    (self.queue_first, self.queue_after, self.queue_first_of, self.queue_after_of),
                    locked,
                    strict=True,
                )
            )
        # The driver raises its own exception, not SQLAlchemy's wrapper of it.
        dbapi = dialect.dbapi
        assert dbapi is not None
        self.integrity_errors: tuple[type[Exception], ...] = (IntegrityError, dbapi.IntegrityError)


class Tx:
    """One open transaction, and what it wrote, for the listeners to hear after the commit."""

    def __init__(self, conn: Connection, hot: HotStatements, epoch: int | None = None) -> None:
        self.conn = conn
        self.hot = hot
        # The leader's epoch this transaction must find in the store (None: unfenced);
        # checked by the first counter's reservation, or by `check_epoch` at the end.
        self.epoch = epoch
        self._epoch_checked = epoch is None
        self._cursor: Any = None
        self.changes: list[Change] = []
        self.events: list[EventRecord] = []
        # counter -> [the last value taken, the value its row holds in this transaction]
        self._counters: dict[str, list[int]] = {}
        # Rows of the change feed and of the events not yet written (flush).
        self._change_rows: list[dict[str, Any]] = []
        self._event_rows: list[dict[str, Any]] = []
        # job id -> [the resource_version its row holds, the newest this transaction wrote]
        self._jobs: dict[int, list[int]] = {}
        self._job_rows: dict[int, dict[str, Any]] = {}  # a job's newest row, not yet written
        self._to_hold: set[int] = set()  # jobs to lock, sent with the next statement (PG)

    def run(self, statement: Compiled, row: dict[str, Any]) -> Any:
        """Execute on the transaction's own driver connection; returns the cursor.

        On PostgreSQL what waits to be sent goes in the same round trip, pipelined: the
        BEGIN, before the transaction's first statement, and the jobs to hold."""
        if self._cursor is None:
            self._cursor = self.conn.connection.cursor()
        raw = self.conn.connection.dbapi_connection
        if self.hot.rowsets is not None and self._along(raw):
            self._send_along(raw, statement, row)
        else:
            self._cursor.execute(statement.sql, statement.params(row))
        return self._cursor

    def _along(self, raw: Any) -> bool:
        """Whether a statement now would carry others (PostgreSQL, outside a pipeline)."""
        if raw.pgconn.pipeline_status:  # in a pipeline already: a nested one would sync
            return False
        return bool(self._to_hold) or raw.info.transaction_status == _NOT_BEGUN

    def _send_along(self, raw: Any, statement: Compiled | None, row: dict[str, Any]) -> None:
        holding, ids = None, sorted(self._to_hold)
        self._to_hold = set()
        with raw.pipeline():
            if ids:
                holding = raw.cursor()
                holding.execute(self.hot.hold_jobs.sql, {"ids": ids})
            if statement is not None:
                self._cursor.execute(statement.sql, statement.params(row))
        if holding is not None:
            for job_id, version in holding.fetchall():
                self.hold(job_id, version)

    def run_many(self, statement: Compiled, rows: Sequence[dict[str, Any]]) -> None:
        if len(rows) == 1:
            self.run(statement, rows[0])
            return
        if self._cursor is None:
            self._cursor = self.conn.connection.cursor()
        self._cursor.executemany(statement.sql, statement.params_many(rows))

    def reserve(self, counter: str, n: int) -> int:
        """Take n consecutive values of a counter; returns the first.

        The first reservation of a counter in this transaction takes its row's lock (an
        UPDATE; on PostgreSQL a SELECT ... FOR UPDATE of it and of the counters taken
        with it), so no other writer reserves from it until the commit; the later ones
        are counted here, and `flush` writes where the counter ended.
        """
        held = self._counters.get(counter)
        if held is not None:
            held[0] += n
        elif self.hot.rowsets is not None:
            self._hold_counters(counter)
            held = self._counters[counter]
            held[0] += n
        else:
            value = self._reserve_first(counter, n)
            self._counters[counter] = held = [value, value]
        return held[0] - n + 1

    def _hold_counters(self, counter: str) -> None:
        """PostgreSQL: lock `counter` and the others most writes take, in one statement
        (fenced by the leader's epoch, if any), so that the transaction waits for one
        reservation, not one per counter. SQLite takes its write lock with an UPDATE."""
        keys = sorted({counter, *_COUNTERS_TOGETHER} - self._counters.keys())
        statement = self.hot.hold_counters if self._epoch_checked else self.hot.hold_counters_fenced
        params: dict[str, Any] = {"keys": keys}
        if not self._epoch_checked:
            params["epoch"] = self.epoch
        rows = self.run(statement, params).fetchall()
        if not rows and not self._epoch_checked:
            raise NotLeader(f"epoch {self.epoch} no longer leads: the write was refused")
        self._epoch_checked = True
        for key, value in rows:
            self._counters[key] = [int(value), int(value)]
        if counter not in self._counters:
            raise RuntimeError(f"the store has no counter {counter!r}")

    def _reserve_first(self, counter: str, n: int) -> int:
        """The counter's row bumped and locked; fenced by the leader's epoch, if any."""
        if self._epoch_checked:
            return int(self.run(self.hot.reserve, {"counter": counter, "n": n}).fetchone()[0])
        params = {"counter": counter, "n": n, "epoch": self.epoch}
        found = self.run(self.hot.reserve_fenced, params).fetchone()
        if found is None:
            raise NotLeader(f"epoch {self.epoch} no longer leads: the write was refused")
        self._epoch_checked = True
        return int(found[0])

    def check_epoch(self) -> None:
        """Before the commit: the leader's epoch still the store's, unless a reservation
        checked it already (the writes that take no counter: tokens, compaction)."""
        if self._epoch_checked:
            return
        if self.run(self.hot.epoch_held, {"epoch": self.epoch}).fetchone() is None:
            raise NotLeader(f"epoch {self.epoch} no longer leads: the write was refused")
        self._epoch_checked = True

    def hold_jobs(self, ids: Iterable[int]) -> None:
        """Lock these jobs' rows (PostgreSQL), one statement for them all sent with the
        transaction's next one, and learn the version each holds: a swap of one of them
        is then checked here, and its row written at `flush` with the others, instead of
        an UPDATE waited for each. A job not found is left to its swap, which finds it
        gone."""
        self._to_hold.update(job_id for job_id in ids if job_id not in self._jobs)

    def _held(self, job_id: int) -> list[int] | None:
        if job_id in self._to_hold:  # not sent yet: now, alone
            self._send_along(self.conn.connection.dbapi_connection, None, {})
        return self._jobs.get(job_id)

    def hold(self, job_id: int, version: int) -> None:
        """A job's row, locked by this transaction, holds `version` (unless it is one
        this transaction wrote: what it wrote is what it knows)."""
        self._jobs.setdefault(job_id, [version, version])

    def swap_job(self, row: dict[str, Any]) -> bool:
        """Compare-and-swap a job's row (`b_id`, `expected_rv`); False when it moved on.

        A job this transaction already wrote, or holds (`hold_jobs`), is locked by it,
        and its newest version is known here: a swap from that version takes without
        asking the store, and only the last version reaches the row, at `flush` (a
        worker's `started` and `complete` of one job in one batch cost one UPDATE). A
        swap from any other version of such a job is stale.
        """
        job_id, expected = row["b_id"], row["expected_rv"]
        held = self._held(job_id)
        if held is not None:
            if held[1] != expected:
                return False
            self._job_rows[job_id] = row | {"expected_rv": held[0]}
            held[1] = row["resource_version"]
            return True
        if self.run(self.hot.update_job, row).rowcount != 1:
            return False
        self._jobs[job_id] = [row["resource_version"], row["resource_version"]]
        return True

    def flush(self) -> None:
        """Write what this transaction holds back: the change feed's rows, the events'
        rows, the counters' ends. Before the commit, and before any statement that reads
        or deletes those rows."""
        if self._job_rows:
            rows = list(self._job_rows.values())
            self._job_rows = {}
            self._write_jobs(rows)
            for row in rows:
                held = self._jobs[row["b_id"]]
                held[0] = held[1]
        rowsets = self.hot.rowsets
        if self._change_rows:
            changes = rowsets.insert_changes if rowsets else None
            self._write(self.hot.insert_change, changes, self._change_rows)
            self._change_rows = []
        if self._event_rows:
            events = rowsets.insert_events if rowsets else None
            self._write(self.hot.insert_event, events, self._event_rows)
            self._event_rows = []
        for counter, held in self._counters.items():
            if held[0] != held[1]:
                self.run(self.hot.set_counter, {"counter": counter, "b_value": held[0]})
                held[1] = held[0]

    def insert_jobs(self, rows: list[dict[str, Any]]) -> None:
        """New jobs' rows, now: a name taken raises the driver's IntegrityError here."""
        rowsets = self.hot.rowsets
        self._write(self.hot.insert_job, rowsets.insert_jobs if rowsets else None, rows)

    def _write_jobs(self, rows: list[dict[str, Any]]) -> None:
        """The newest rows of jobs this transaction holds locked: they cannot have moved."""
        rowsets = self.hot.rowsets
        if rowsets is not None:  # checked by the statement itself (rowsets.py)
            self.run_rows(rowsets.update_jobs, rows)
            return
        self.run_many(self.hot.update_job, rows)
        if self._cursor.rowcount not in (len(rows), -1):
            raise RuntimeError("a job this transaction holds changed under it")

    def _write(self, many: Compiled, one: RowSet | None, rows: list[dict[str, Any]]) -> None:
        """The rows as one statement (`one`, PostgreSQL's) or as `many` an executemany."""
        if one is None:
            self.run_many(many, rows)
        else:
            self.run_rows(one, rows)

    def run_rows(self, statement: RowSet, rows: Sequence[dict[str, Any]]) -> None:
        """One statement for all the rows (PostgreSQL), whatever their number."""
        if self._cursor is None:
            self._cursor = self.conn.connection.cursor()
        self._cursor.execute(statement.sql, statement.params(rows))

    def next_revision(self) -> int:
        return self.reserve("revision", 1)

    def record(self, kind: Kind, op: Op, obj: Resource, rev: int, text: str | None = None) -> None:
        assert obj.metadata.resource_version == rev or op == "DELETED"
        self.record_many(kind, op, [(obj, text)], revision=rev)

    def record_many(
        self, kind: Kind, op: Op, written: Sequence[tuple[Resource, str | None]], revision: int = 0
    ) -> None:
        """Append changes; each object comes with its JSON text when the caller has it."""
        rows = []
        for obj, known in written:
            text = known if known is not None else to_json(obj)
            rev = revision or obj.metadata.resource_version or 0
            key = str(obj.metadata.id) if isinstance(obj, Job) else str(obj.metadata.name)
            secret = isinstance(obj, Job) and holds_secrets(obj)
            row = {"revision": rev, "kind": kind, "op": op, "key": key, "body": text}
            rows.append(row | {"secret": secret})
            self.changes.append(Change(rev, kind, op, key, obj, text))
        self._change_rows.extend(rows)

    def scrub_history(self, job: Job) -> None:
        """Mask the secret values of the earlier versions of `job` the change feed keeps.

        Those rows are flagged `secret` when written; the partial index on the flag finds
        them without a scan. Each is masked by its own patterns and the job's now.
        """
        self.flush()
        found = self.conn.execute(_SECRET_CHANGES, {"key": str(job.id)}).all()
        for revision, body in found:
            old = Job.model_validate_json(body)
            masked = mask_job(old, patterns_of(old) + patterns_of(job))
            self.conn.execute(_SCRUB_CHANGE, {"b_rev": revision, "b_body": to_json(masked)})

    def add_events(self, events: Iterable[EventRecord]) -> None:
        records = list(events)
        if not records:
            return
        first = self.reserve("event_seq", len(records))
        now = rfc3339(datetime.now(UTC))
        rows = []
        for i, ev in enumerate(records):
            ev.ts, ev.seq = ev.ts or now, first + i
            rows.append(
                {
                    "seq": ev.seq,
                    "ts": ev.ts,
                    "event": ev.event,
                    "job": ev.job,
                    "worker": ev.worker,
                    "body": ev.fields_json(),
                }
            )
        self._event_rows.extend(rows)
        self.events.extend(records)


def rfc3339(ts: datetime) -> str:
    return ts.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def to_json(obj: Resource) -> str:
    return obj.model_dump_json(by_alias=True, exclude_none=True)
