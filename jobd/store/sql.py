"""The Store on SQLAlchemy Core: one implementation for SQLite and PostgreSQL.

Each write runs in one transaction: bump the global revision, compare-and-swap the row on
its old resource_version, append the change to the feed and the events it justifies.
Listeners hear of the change only after the commit, so nothing downstream (watchers,
events.jsonl) ever reports a write that could still roll back.
"""

from __future__ import annotations

import json
import operator
import os
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import IntegrityError
from sqlalchemy.sql.elements import ClauseElement

from jobd.api.arrays import JobArray
from jobd.api.models import (
    SCRUBBED_PHASES,
    Job,
    ObjectMeta,
    Phase,
    Project,
    Resource,
    Worker,
    assign,
    utcnow,
)
from jobd.api.secrets import holds_secrets, mask_job, patterns_of, secret_keys
from jobd.store import schema as t
from jobd.store.base import (
    Change,
    CommitListener,
    Conflict,
    EventRecord,
    Gone,
    Kind,
    NotFound,
    Op,
    StorageFull,
    StoreUnavailable,
    TokenRecord,
)
from jobd.store.faults import describe_store, storage_fault

__all__ = [
    "PROBE_FREE_BYTES",
    "SQLStore",
    "normalize_url",
    "open_store",
    "random_uuids",
    "sqlite_url",
]

_Named = TypeVar("_Named", Project, Worker)
# What a SQLite store's disk must have free for probe_write to call it writable again.
PROBE_FREE_BYTES = 256 * 1024
EventsFor = Callable[[Job], Iterable[EventRecord]]
_MIGRATIONS = Path(__file__).parent / "migrations"
_MODELS: dict[str, type[Job] | type[Project] | type[Worker]] = {
    "Job": Job,
    "Project": Project,
    "Worker": Worker,
}


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


class SQLStore:
    """Store implementation over any SQLAlchemy engine (SQLite file or PostgreSQL)."""

    def __init__(self, url: str) -> None:
        self.url = normalize_url(url)
        self.engine: Engine = self._make_engine(self.url)
        self._listeners: list[CommitListener] = []
        self._lock = threading.RLock()  # one writer at a time keeps CAS and revisions simple
        self._sqlite = self.url.startswith("sqlite")
        self._hot = _HotStatements(self.engine.dialect)
        self._batch: _Tx | None = None  # the open transaction of batch(), if any
        self._batch_durable = False
        self.where = describe_store(self.url)
        self._write_error: StoreUnavailable | None = None
        # Every error of a statement SQLAlchemy runs passes here: storage faults leave
        # as the store's own errors (store/faults.py), with where they happened.
        sa.event.listen(self.engine, "handle_error", self._translate)

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

    # -- lifecycle -------------------------------------------------------------------

    def migrate(self, revision: str = "head") -> None:
        """Bring the schema up to `revision` (the newest unless told)."""
        cfg = Config()
        cfg.set_main_option("script_location", str(_MIGRATIONS))
        with self.engine.begin() as conn:
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, revision)

    def close(self) -> None:
        self.engine.dispose()

    def checkpoint(self) -> None:
        """Copy SQLite's write-ahead log back into the database file; nothing elsewhere.

        Safe from another thread while writers go on (a passive checkpoint waits for
        nobody), and the GIL is released while SQLite works: the broker calls this from
        a thread, so a commit no longer pays for the copy of the pages before it.
        """
        if self._sqlite:
            with self.engine.connect() as conn:
                conn.exec_driver_sql("PRAGMA wal_checkpoint(PASSIVE)")

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
        with self._lock, self._writing(durable=True) as conn:
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
        self._listeners.append(listener)

    def revision(self) -> int:
        with self.engine.connect() as conn:
            value = conn.execute(sa.select(t.meta.c.value).where(t.meta.c.key == "revision"))
            return int(value.scalar_one())

    # -- the write path ------------------------------------------------------------------

    @contextmanager
    def _tx(self, durable: bool = False) -> Iterator[_Tx]:
        """One transaction; its listeners run after the commit.

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
                tx = _Tx(conn, self._hot)
                yield tx
            # Committed: now, and only now, may anyone hear of it.
            for listener in self._listeners:
                listener(tx.changes, tx.events)

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
        with self._lock, self._tx(durable) as tx:
            self._batch, self._batch_durable = tx, durable
            try:
                yield
            finally:
                self._batch = None

    def create_jobs(
        self,
        jobs: Sequence[Job],
        events_for: EventsFor | None = None,
        on_ids: Callable[[list[Job]], None] | None = None,
    ) -> list[Job]:
        """Insert jobs in one transaction; `events_for(job)` sees each job with its id.

        `on_ids(jobs)` runs once ids are assigned and before the rows are written, so
        jobs of one batch can refer to each other (a child naming a parent beside it).

        Ids and revisions are reserved as one block and rows go in as one executemany,
        so a batch costs a handful of statements and one commit, however large it is.

        The jobs handed in become the stored objects: their metadata is stamped in place
        (a copy per job cost more than the job's rows). Callers pass jobs of their own
        making, as admission's prepare_new_job does. If this raises, a name it generated
        is taken back, so the same jobs may be handed in again.
        """
        if not jobs:
            return []
        unnamed = [job.metadata for job in jobs if job.metadata.name is None]
        try:
            return self._insert_jobs(jobs, events_for, on_ids)
        except BaseException:
            for meta in unnamed:
                meta.name = None
            raise

    def _insert_jobs(
        self,
        jobs: Sequence[Job],
        events_for: EventsFor | None,
        on_ids: Callable[[list[Job]], None] | None,
    ) -> list[Job]:
        with self._tx(durable=True) as tx:
            first_rev = tx.reserve("revision", len(jobs))
            first_id = tx.reserve("job_id", len(jobs))
            now = utcnow()
            created = list(jobs)
            uids = random_uuids(len(created))
            for i, job in enumerate(created):
                _stamp(job.metadata, first_id + i, first_rev + i, now, uids[i])
            if on_ids is not None:
                on_ids(created)
            rows = [_job_row(j) for j in created]
            try:
                tx.run_many(tx.hot.insert_job, rows)
            except tx.hot.integrity_errors:
                raise self._name_conflict(created) from None
            deps = [
                {"parent": p, "child": j.id} for j in created for p in sorted(set(j.status.parents))
            ]
            if deps:
                tx.conn.execute(t.job_deps.insert(), deps)
            written = [(job, row["body"]) for job, row in zip(created, rows, strict=True)]
            tx.record_many("Job", "ADDED", written)
            if events_for is not None:
                tx.add_events([ev for job in created for ev in events_for(job)])
        return created

    def create_array(
        self,
        array: JobArray,
        members: Sequence[Job],
        on_id: Callable[[int], None],
        events_for: EventsFor | None = None,
    ) -> JobArray:
        """Insert an array and its member jobs in one transaction: all, or nothing.

        `on_id(array_id)` runs once the array has its id and before anything is written,
        to name the array and its members (the members' names hold the array's). The
        array's `status.jobs` is filled with the members' ids, in their order.
        """
        with self.batch(durable=True), self._tx(durable=True) as tx:
            array_id = tx.reserve("array_id", 1)
            on_id(array_id)
            created = self._insert_jobs(members, events_for, None)
            assign(array.metadata, id=array_id, created_at=utcnow(), generation=1)
            array.status.jobs = [job.id for job in created]
            row = {
                "id": array_id,
                "project": array.project,
                "name": array.metadata.name,
                "body": array.model_dump_json(by_alias=True, exclude_none=True),
            }
            try:
                tx.conn.execute(sa.insert(t.arrays).values(row))
            except IntegrityError:
                raise Conflict(f"array {array.ref} already exists") from None
        return array

    def get_array(self, array_id: int) -> JobArray | None:
        rows = self._rows(sa.select(t.arrays.c.body).where(t.arrays.c.id == array_id))
        return JobArray.model_validate_json(rows[0].body) if rows else None

    def get_array_by_name(self, project: str, name: str) -> JobArray | None:
        found = self.list_arrays(project=project, name=name)
        return found[0] if found else None

    def list_arrays(
        self,
        *,
        project: str | None = None,
        projects: Iterable[str] | None = None,
        name: str | None = None,
    ) -> list[JobArray]:
        query = sa.select(t.arrays.c.body).order_by(t.arrays.c.id)
        if project is not None:
            query = query.where(t.arrays.c.project == project)
        if projects is not None:
            query = query.where(t.arrays.c.project.in_(list(projects)))
        if name is not None:
            query = query.where(t.arrays.c.name == name)
        return [JobArray.model_validate_json(row.body) for row in self._rows(query)]

    def delete_array(self, array: JobArray) -> None:
        """Remove the array's row (its members are jobs, deleted as jobs are)."""
        with self._tx(durable=True) as tx:  # inside batch(): the batch's commit
            tx.conn.execute(sa.delete(t.arrays).where(t.arrays.c.id == array.id))

    def get_jobs(self, ids: Sequence[int]) -> list[Job]:
        """The stored jobs of these ids, in id order (those not stored are left out)."""
        found: list[Job] = []
        with self.engine.connect() as conn:
            for i in range(0, len(ids), 500):
                query = sa.select(t.jobs.c.body).where(t.jobs.c.id.in_(ids[i : i + 500]))
                found.extend(Job.model_validate_json(row.body) for row in conn.execute(query))
        return sorted(found, key=lambda job: job.id)

    def phases_of(self, ids: Sequence[int]) -> dict[int, Phase]:
        """The phase of each stored job of these ids, from the indexed column: no body
        is parsed (a child of a job array asks for thousands)."""
        found: dict[int, Phase] = {}
        with self.engine.connect() as conn:
            for i in range(0, len(ids), 500):
                query = sa.select(t.jobs.c.id, t.jobs.c.phase).where(
                    t.jobs.c.id.in_(ids[i : i + 500])
                )
                found.update((row.id, Phase(row.phase)) for row in conn.execute(query))
        return found

    def _name_conflict(self, jobs: Sequence[Job]) -> Conflict:
        seen: set[str] = set()
        for job in jobs:
            if job.ref in seen or self.get_job_by_name(job.project, job.metadata.name or ""):
                return Conflict(f"job {job.ref} already exists")
            seen.add(job.ref)
        return Conflict("a job in this request already exists")

    def update_job(
        self, job: Job, events: Iterable[EventRecord] = (), *, durable: bool = False
    ) -> Job:
        """Compare-and-swap; `durable` for what a user was told (see _tx)."""
        with self._tx(durable) as tx:
            expected = job.metadata.resource_version
            rev = tx.next_revision()
            # A new object sharing everything but metadata: the caller's stays as it was.
            meta = job.metadata.model_copy(update={"resource_version": rev})
            job = job.model_copy(update={"metadata": meta})
            row = _job_row(job)
            row["b_id"], row["expected_rv"] = row.pop("id"), expected
            if tx.run(tx.hot.update_job, row).rowcount != 1:
                raise self._stale("job", job.metadata.id, self.get_job(job.id) is not None)
            tx.record("Job", "MODIFIED", job, rev, row["body"])
            tx.add_events(events)
            if job.status.phase in SCRUBBED_PHASES and secret_keys(job.spec.env, patterns_of(job)):
                tx.scrub_history(job)
        return job

    def delete_job(self, job: Job) -> None:
        """Compare-and-swap delete; the feed's last word of it, and its history, masked."""
        with self._tx(durable=True) as tx:
            self._delete(tx, "Job", t.jobs.c.id, job.id, mask_job(job))
            tx.conn.execute(sa.delete(t.job_deps).where(t.job_deps.c.child == job.id))
            tx.scrub_history(job)

    def expire_job(self, job: Job, events: Iterable[EventRecord] = ()) -> None:
        """Compare-and-swap delete of a finished job with its events; then `events`.

        Retention's removal (controllers/retention.py): the job's row, its dependency
        rows and its events go in one commit, and `events` (its `job_expired`) are the
        ones left about it. Raises Conflict when the job changed, NotFound when it is gone.
        """
        with self._tx(durable=True) as tx:
            self._delete(tx, "Job", t.jobs.c.id, job.id, mask_job(job))
            tx.conn.execute(sa.delete(t.job_deps).where(t.job_deps.c.child == job.id))
            tx.conn.execute(sa.delete(t.events).where(t.events.c.job == job.id))
            tx.scrub_history(job)
            tx.add_events(events)

    def _delete(
        self, tx: _Tx, kind: Kind, key: sa.Column[Any], value: object, obj: Job | Project
    ) -> None:
        """Compare-and-swap delete; the change feed hears the last version."""
        rev = tx.next_revision()
        table = key.table
        result = tx.conn.execute(
            sa.delete(table).where(
                key == value, table.c.resource_version == obj.metadata.resource_version
            )
        )
        if result.rowcount != 1:
            exists = tx.conn.execute(sa.select(key).where(key == value)).first() is not None
            raise self._stale(kind.lower(), value, exists)
        tx.record(kind, "DELETED", obj, rev)

    @staticmethod
    def _stale(kind: str, key: object, exists: bool) -> Exception:
        if exists:
            return Conflict(f"{kind} {key} was changed by someone else; read it again and retry")
        return NotFound(f"{kind} {key} not found")

    def put_project(self, project: Project) -> Project:
        return self._put_named("Project", t.projects, project, [], durable=True)

    def put_worker(self, worker: Worker, events: Iterable[EventRecord] = ()) -> Worker:
        return self._put_named("Worker", t.workers, worker, events)

    def _put_named(
        self,
        kind: Kind,
        table: sa.Table,
        obj: _Named,
        events: Iterable[EventRecord],
        durable: bool = False,
    ) -> _Named:
        """Create when resource_version is None, else compare-and-swap."""
        obj = obj.model_copy(update={"metadata": obj.metadata.model_copy()})
        name, expected = obj.name, obj.metadata.resource_version
        with self._tx(durable) as tx:
            rev = tx.next_revision()
            obj.metadata.resource_version = rev
            if expected is None:
                obj.metadata.uid = obj.metadata.uid or str(uuid.uuid4())
                obj.metadata.created_at = obj.metadata.created_at or utcnow()
                obj.metadata.generation = max(obj.metadata.generation, 1)
                row = _named_row(obj)
                try:
                    tx.conn.execute(sa.insert(table).values(**row))
                except IntegrityError:
                    raise Conflict(f"{kind.lower()} {name} already exists") from None
                op: Op = "ADDED"
            else:
                row = _named_row(obj)
                result = tx.conn.execute(
                    sa.update(table)
                    .where(table.c.name == name, table.c.resource_version == expected)
                    .values(**row)
                )
                if result.rowcount != 1:
                    raise Conflict(f"{kind.lower()} {name} was changed by someone else; retry")
                op = "MODIFIED"
            tx.record(kind, op, obj, rev, row["body"])
            tx.add_events(events)
        return obj

    def delete_project(self, project: Project) -> None:
        with self._tx(durable=True) as tx:
            self._delete(tx, "Project", t.projects.c.name, project.name, project)

    def append_events(self, events: Iterable[EventRecord]) -> None:
        with self._tx() as tx:
            tx.add_events(events)

    # -- reads ----------------------------------------------------------------------------

    def _rows(self, query: sa.Select[Any]) -> list[Any]:
        with self.engine.connect() as conn:
            return list(conn.execute(query))

    def get_job(self, job_id: int) -> Job | None:
        with self.engine.connect() as conn:
            row = conn.execute(_GET_JOB, {"id": job_id}).first()
        return Job.model_validate_json(row.body) if row else None

    def get_job_by_name(self, project: str, name: str) -> Job | None:
        return self.get_jobs_by_name(project, [name]).get(name)

    def get_jobs_by_name(self, project: str, names: Sequence[str]) -> dict[str, Job]:
        """The jobs of `project` with these names, by name: one query per 500 names."""
        found: dict[str, Job] = {}
        with self.engine.connect() as conn:
            for i in range(0, len(names), 500):
                params = {"project": project, "names": list(names[i : i + 500])}
                for row in conn.execute(_JOBS_BY_NAME, params):
                    job = Job.model_validate_json(row.body)
                    found[job.metadata.name or ""] = job
        return found

    def list_jobs(
        self,
        *,
        project: str | None = None,
        projects: Iterable[str] | None = None,
        phases: Iterable[Phase] | None = None,
        worker: str | None = None,
        name: str | None = None,
        ready: bool | None = None,
        nominated: bool | None = None,
        after_id: int = 0,
        limit: int | None = None,
        by_priority: bool = False,
    ) -> list[Job]:
        q = sa.select(t.jobs.c.body)
        if projects is not None:
            q = q.where(t.jobs.c.project.in_(list(projects)))
        if nominated is not None:
            column = t.jobs.c.nominated_worker
            q = q.where(column.is_not(None) if nominated else column.is_(None))
        if project is not None:
            q = q.where(t.jobs.c.project == project)
        if phases is not None:
            q = q.where(t.jobs.c.phase.in_([str(p) for p in phases]))
        if worker is not None:
            q = q.where(t.jobs.c.worker == worker)
        if name is not None:
            q = q.where(t.jobs.c.name == name)
        if ready is not None:
            q = q.where(t.jobs.c.ready == ready)
        if after_id:
            q = q.where(t.jobs.c.id > after_id)
        q = (
            q.order_by(t.jobs.c.priority.desc(), t.jobs.c.id)
            if by_priority
            else q.order_by(t.jobs.c.id)
        )
        if limit is not None:
            q = q.limit(limit)
        return [Job.model_validate_json(row.body) for row in self._rows(q)]

    def queue_head(
        self, limit: int, fits: tuple[int, int], after: tuple[int, int] | None = None
    ) -> list[Job]:
        """Ready Pending jobs no bigger than `fits` (slots, GPUs), in the scheduler's order.

        `after` pages by keyset: the (priority, id) of the last job of the page before.
        Statements compiled once: a scheduling pass runs this on every change that frees
        room, and building the query each time cost more than running it.
        """
        params: dict[str, Any] = {"limit": limit, "slots": fits[0], "gpus": fits[1]}
        statement = self._hot.queue_first
        if after is not None:
            statement = self._hot.queue_after
            params["prio"], params["last_id"] = after
        try:
            with self.engine.connect() as conn:
                cursor = conn.connection.cursor()
                try:
                    cursor.execute(statement.sql, statement.params(params))
                    rows = cursor.fetchall()
                finally:
                    cursor.close()
        except Exception as exc:
            fault = storage_fault(exc, self.where, "read")
            if fault is None or fault is exc:
                raise
            raise fault from exc
        return [Job.model_validate_json(row[0]) for row in rows]

    def count_jobs_by_phase(self) -> dict[str, int]:
        q = sa.select(t.jobs.c.phase, sa.func.count()).group_by(t.jobs.c.phase)
        return {row[0]: int(row[1]) for row in self._rows(q)}

    def children_of(self, job_id: int) -> list[int]:
        q = sa.select(t.job_deps.c.child).where(t.job_deps.c.parent == job_id)
        return sorted(int(row.child) for row in self._rows(q))

    def parents(self) -> set[int]:
        return {int(row.parent) for row in self._rows(sa.select(t.job_deps.c.parent).distinct())}

    def get_project(self, name: str) -> Project | None:
        rows = self._rows(sa.select(t.projects.c.body).where(t.projects.c.name == name))
        return Project.model_validate_json(rows[0].body) if rows else None

    def list_projects(self) -> list[Project]:
        rows = self._rows(sa.select(t.projects.c.body).order_by(t.projects.c.name))
        return [Project.model_validate_json(row.body) for row in rows]

    def get_worker(self, name: str) -> Worker | None:
        rows = self._rows(sa.select(t.workers.c.body).where(t.workers.c.name == name))
        return Worker.model_validate_json(rows[0].body) if rows else None

    def list_workers(self) -> list[Worker]:
        rows = self._rows(sa.select(t.workers.c.body).order_by(t.workers.c.name))
        return [Worker.model_validate_json(row.body) for row in rows]

    # -- tokens: outside the revision and the change feed ----------------------------------

    def create_token(self, record: TokenRecord) -> None:
        row = {
            "label": record.label,
            "digest": record.digest,
            "role": record.role,
            "projects": json.dumps(list(record.projects)),
            "worker": record.worker,
            "created_at": record.created_at,
            "last_used_at": record.last_used_at,
        }
        try:
            with self._lock, self._writing(durable=True) as conn:
                conn.execute(sa.insert(t.tokens).values(row))
        except IntegrityError:
            raise Conflict(f"a token labelled {record.label!r} exists") from None

    def list_tokens(self) -> list[TokenRecord]:
        rows = self._rows(sa.select(t.tokens).order_by(t.tokens.c.label))
        return [
            TokenRecord(
                label=row.label,
                digest=row.digest,
                role=row.role,
                projects=tuple(json.loads(row.projects)),
                worker=row.worker,
                created_at=row.created_at,
                last_used_at=row.last_used_at,
            )
            for row in rows
        ]

    def delete_token(self, label: str) -> None:
        with self._lock, self._writing(durable=True) as conn:
            deleted = conn.execute(sa.delete(t.tokens).where(t.tokens.c.label == label))
        if deleted.rowcount == 0:
            raise NotFound(f"no token is labelled {label!r}")

    def touch_tokens(self, last_used: dict[str, str]) -> None:
        if not last_used:
            return
        statement = (
            sa.update(t.tokens)
            .where(t.tokens.c.label == sa.bindparam("b_label"))
            .values(last_used_at=sa.bindparam("b_used"))
        )
        rows = [{"b_label": label, "b_used": used} for label, used in last_used.items()]
        with self._lock, self._writing(durable=False) as conn:
            conn.execute(statement, rows)

    def changes_since(self, revision: int, limit: int = 1000) -> list[Change]:
        oldest = self._rows(sa.select(sa.func.min(t.changes.c.revision)))[0][0]
        if oldest is None:  # none kept (all compacted): the next change will be the oldest
            oldest = self.revision() + 1
        if revision + 1 < oldest:
            raise Gone(f"revision {revision} has been compacted; the oldest kept is {oldest}")
        q = (
            sa.select(t.changes)
            .where(t.changes.c.revision > revision)
            .order_by(t.changes.c.revision)
            .limit(limit)
        )
        return [
            Change(
                int(r.revision),
                r.kind,
                r.op,
                r.key,
                _MODELS[r.kind].model_validate_json(r.body),
                r.body,
            )
            for r in self._rows(q)
        ]

    def compact(self, keep: int) -> int:
        """Drop all but the newest `keep` changes; returns how many went."""
        with self._lock, self.engine.begin() as conn:
            newest = conn.execute(sa.select(sa.func.max(t.changes.c.revision))).scalar()
            if newest is None:
                return 0
            result = conn.execute(sa.delete(t.changes).where(t.changes.c.revision <= newest - keep))
            return int(result.rowcount)

    def list_events(
        self,
        *,
        job: int | None = None,
        event: str | None = None,
        after_seq: int = 0,
        limit: int = 1000,
        projects: Iterable[str] | None = None,
    ) -> list[EventRecord]:
        q = sa.select(t.events).where(t.events.c.seq > after_seq)
        if projects is not None:  # the events of these projects' jobs, and no other
            in_projects = sa.select(t.jobs.c.id).where(t.jobs.c.project.in_(list(projects)))
            q = q.where(t.events.c.job.in_(in_projects))
        if job is not None:
            q = q.where(t.events.c.job == job)
        if event is not None:
            q = q.where(t.events.c.event == event)
        q = q.order_by(t.events.c.seq).limit(limit)
        return [
            EventRecord(r.event, r.job, r.worker, json.loads(r.body), r.ts, int(r.seq))
            for r in self._rows(q)
        ]

    def last_event_seq(self) -> int:
        """The newest event's seq (0 for none): where a follower of new events starts."""
        rows = self._rows(sa.select(sa.func.max(t.events.c.seq)))
        return int(rows[0][0] or 0) if rows else 0


_UPDATE_JOB = sa.update(t.jobs).where(
    t.jobs.c.id == sa.bindparam("b_id"),
    t.jobs.c.resource_version == sa.bindparam("expected_rv"),
)
_GET_JOB = sa.select(t.jobs.c.body).where(t.jobs.c.id == sa.bindparam("id"))
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
_JOBS_BY_NAME = sa.select(t.jobs.c.body).where(
    t.jobs.c.project == sa.bindparam("project"),
    t.jobs.c.name.in_(sa.bindparam("names", expanding=True)),
)
_QUEUE_FIRST = (
    sa.select(t.jobs.c.body)
    .where(
        t.jobs.c.phase == Phase.PENDING.value,
        t.jobs.c.ready == sa.true(),
        t.jobs.c.slots <= sa.bindparam("slots"),
        t.jobs.c.gpus <= sa.bindparam("gpus"),
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
_NEXT = (
    sa.update(t.meta)
    .where(t.meta.c.key == sa.bindparam("counter"))
    .values(value=t.meta.c.value + sa.bindparam("n"))
    .returning(t.meta.c.value)
)


def _stamp(meta: ObjectMeta, job_id: int, rev: int, now: datetime, uid: str) -> None:
    """The server's fields of a new job, written into its metadata."""
    assign(
        meta,
        id=job_id,
        resource_version=rev,
        uid=meta.uid or uid,
        created_at=meta.created_at or now,
        generation=max(meta.generation, 1),
        name=meta.name or f"job-{job_id}",
    )


# The bits that make a random 128-bit number a version-4, RFC 4122 UUID (as uuid.uuid4).
_UUID4_CLEAR = ~((0xF000 << 64) | (0xC000 << 48)) & ((1 << 128) - 1)
_UUID4_SET = (0x4000 << 64) | (0x8000 << 48)


def random_uuids(n: int) -> list[str]:
    """n version-4 UUIDs as text, like str(uuid.uuid4()), from one read of the OS's
    randomness: at a job's insert, uuid4's object and formatting cost 3 % of an apply."""
    raw = os.urandom(16 * n)
    out = []
    for i in range(0, 16 * n, 16):
        text = f"{int.from_bytes(raw[i : i + 16]) & _UUID4_CLEAR | _UUID4_SET:032x}"
        out.append(f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}")
    return out


class _Compiled:
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


class _HotStatements:
    """The writes every job makes, run without SQLAlchemy's per-execution work.

    Compiling, caching and result handling cost SQLAlchemy 40-80 µs a statement, more
    than SQLite takes to run one; a job's life is a dozen of these writes. Everything
    else (reads, schema, migrations, the rarer writes) goes through SQLAlchemy as usual.
    The parameters are ints, strings and booleans, which both drivers take as they are.
    """

    def __init__(self, dialect: sa.Dialect) -> None:
        self.reserve = _Compiled(_NEXT, dialect)
        job_columns = [c.name for c in t.jobs.columns if c.name != "id"]
        self.update_job = _Compiled(_UPDATE_JOB, dialect, job_columns)
        self.insert_job = _Compiled(t.jobs.insert(), dialect)
        self.insert_change = _Compiled(t.changes.insert(), dialect)
        self.insert_event = _Compiled(t.events.insert(), dialect)
        self.queue_first = _Compiled(_QUEUE_FIRST, dialect)
        self.queue_after = _Compiled(_QUEUE_AFTER, dialect)
        # The driver raises its own exception, not SQLAlchemy's wrapper of it.
        dbapi = dialect.dbapi
        assert dbapi is not None
        self.integrity_errors: tuple[type[Exception], ...] = (IntegrityError, dbapi.IntegrityError)


class _Tx:
    """One open transaction, and what it wrote, for the listeners to hear after the commit."""

    def __init__(self, conn: Connection, hot: _HotStatements) -> None:
        self.conn = conn
        self.hot = hot
        self._cursor: Any = None
        self.changes: list[Change] = []
        self.events: list[EventRecord] = []

    def run(self, statement: _Compiled, row: dict[str, Any]) -> Any:
        """Execute on the transaction's own driver connection; returns the cursor."""
        if self._cursor is None:
            self._cursor = self.conn.connection.cursor()
        self._cursor.execute(statement.sql, statement.params(row))
        return self._cursor

    def run_many(self, statement: _Compiled, rows: Sequence[dict[str, Any]]) -> None:
        if len(rows) == 1:
            self.run(statement, rows[0])
            return
        if self._cursor is None:
            self._cursor = self.conn.connection.cursor()
        self._cursor.executemany(statement.sql, statement.params_many(rows))

    def reserve(self, counter: str, n: int) -> int:
        """Take n consecutive values of a counter; returns the first."""
        value = self.run(self.hot.reserve, {"counter": counter, "n": n}).fetchone()[0]
        return int(value) - n + 1

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
            text = known if known is not None else _to_json(obj)
            rev = revision or obj.metadata.resource_version or 0
            key = str(obj.metadata.id) if isinstance(obj, Job) else str(obj.metadata.name)
            secret = isinstance(obj, Job) and holds_secrets(obj)
            row = {"revision": rev, "kind": kind, "op": op, "key": key, "body": text}
            rows.append(row | {"secret": secret})
            self.changes.append(Change(rev, kind, op, key, obj, text))
        self.run_many(self.hot.insert_change, rows)

    def scrub_history(self, job: Job) -> None:
        """Mask the secret values of the earlier versions of `job` the change feed keeps.

        Those rows are flagged `secret` when written; the partial index on the flag finds
        them without a scan. Each is masked by its own patterns and the job's now.
        """
        found = self.conn.execute(_SECRET_CHANGES, {"key": str(job.id)}).all()
        for revision, body in found:
            old = Job.model_validate_json(body)
            masked = mask_job(old, patterns_of(old) + patterns_of(job))
            self.conn.execute(_SCRUB_CHANGE, {"b_rev": revision, "b_body": _to_json(masked)})

    def add_events(self, events: Iterable[EventRecord]) -> None:
        records = list(events)
        if not records:
            return
        first = self.reserve("event_seq", len(records))
        now = _rfc3339(datetime.now(UTC))
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
        self.run_many(self.hot.insert_event, rows)
        self.events.extend(records)


def _rfc3339(ts: datetime) -> str:
    return ts.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _job_row(job: Job) -> dict[str, Any]:
    return {
        "id": job.metadata.id,
        "uid": job.metadata.uid,
        "project": job.project,
        "name": job.metadata.name,
        "phase": str(job.status.phase),
        "priority": job.status.effective.priority,
        "ready": job.status.dependencies_met,
        "slots": job.spec.resources.slots,
        "gpus": job.spec.resources.gpus,
        "worker": job.status.worker,
        "nominated_worker": job.status.nominated_worker,
        "resource_version": job.metadata.resource_version,
        "body": _to_json(job),
    }


def _named_row(obj: Project | Worker) -> dict[str, Any]:
    return {
        "name": obj.name,
        "resource_version": obj.metadata.resource_version,
        "body": _to_json(obj),
    }


def _to_json(obj: Resource) -> str:
    return obj.model_dump_json(by_alias=True, exclude_none=True)


def open_store(url: str) -> SQLStore:
    """A migrated store, ready to use."""
    store = SQLStore(url)
    store.migrate()
    return store


def sqlite_url(data_dir: Path) -> str:
    return f"sqlite:///{data_dir / 'jobd.db'}"
