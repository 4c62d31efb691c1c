"""Jobs in the store: create in blocks, compare-and-swap updates, deletes, and reads.

The busiest module of the store: a job's life is a dozen writes, each run through the
precompiled statements of statements.py, and the scheduler reads the queue's head on
every change that frees room.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from jobd.api.models import SCRUBBED_PHASES, Job, ObjectMeta, Phase, assign, utcnow
from jobd.api.secrets import mask_job, patterns_of, secret_keys
from jobd.store import schema as t
from jobd.store.base import Conflict, EventRecord, Fits
from jobd.store.faults import storage_fault
from jobd.store.sql.cas import SQLCompareAndSwap
from jobd.store.sql.statements import Compiled, Tx, to_json

__all__ = ["EventsFor", "SQLJobs", "random_uuids"]

EventsFor = Callable[[Job], Iterable[EventRecord]]
_GET_JOB = sa.select(t.jobs.c.body).where(t.jobs.c.id == sa.bindparam("id"))
_DELETE_MEMBERS = sa.delete(t.job_members).where(t.job_members.c.job_id == sa.bindparam("job_id"))
_JOBS_BY_NAME = sa.select(t.jobs.c.body).where(
    t.jobs.c.project == sa.bindparam("project"),
    t.jobs.c.name.in_(sa.bindparam("names", expanding=True)),
)


class SQLJobs(SQLCompareAndSwap):
    """The jobs' table, its dependency rows, and the jobs' part of the change feed."""

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
                tx.insert_jobs(rows)
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

    def get_jobs(self, ids: Sequence[int]) -> list[Job]:
        """The stored jobs of these ids, in id order (those not stored are left out)."""
        found: list[Job] = []
        with self.reads.connect() as conn:
            for i in range(0, len(ids), 500):
                query = sa.select(t.jobs.c.body).where(t.jobs.c.id.in_(ids[i : i + 500]))
                found.extend(Job.model_validate_json(row.body) for row in conn.execute(query))
        return sorted(found, key=lambda job: job.id)

    def phases_of(self, ids: Sequence[int]) -> dict[int, Phase]:
        """The phase of each stored job of these ids, from the indexed column: no body
        is parsed (a child of a job array asks for thousands)."""
        found: dict[int, Phase] = {}
        with self.reads.connect() as conn:
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
            if not tx.swap_job(row):
                raise self._stale("job", job.metadata.id, self.get_job(job.id) is not None)
            tx.record("Job", "MODIFIED", job, rev, row["body"])
            if job.spec.nodes > 1:  # a job of one node has no members' rows
                _write_members(tx.conn, job)
            tx.add_events(events)
            if job.status.phase in SCRUBBED_PHASES and secret_keys(job.spec.env, patterns_of(job)):
                tx.scrub_history(job)
        return job

    def delete_job(self, job: Job) -> None:
        """Compare-and-swap delete; the feed's last word of it, and its history, masked."""
        with self._tx(durable=True) as tx:
            self._delete(tx, "Job", t.jobs.c.id, job.id, mask_job(job))
            tx.conn.execute(sa.delete(t.job_deps).where(t.job_deps.c.child == job.id))
            if job.spec.nodes > 1:
                tx.conn.execute(_DELETE_MEMBERS, {"job_id": job.id})
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
            if job.spec.nodes > 1:
                tx.conn.execute(_DELETE_MEMBERS, {"job_id": job.id})
            tx.flush()  # the job's events this transaction added go too
            tx.conn.execute(sa.delete(t.events).where(t.events.c.job == job.id))
            tx.scrub_history(job)
            tx.add_events(events)

    def get_job(self, job_id: int) -> Job | None:
        with self.reads.connect() as conn:
            row = conn.execute(_GET_JOB, {"id": job_id}).first()
        return Job.model_validate_json(row.body) if row else None

    def get_job_by_name(self, project: str, name: str) -> Job | None:
        return self.get_jobs_by_name(project, [name]).get(name)

    def get_jobs_by_name(self, project: str, names: Sequence[str]) -> dict[str, Job]:
        """The jobs of `project` with these names, by name: one query per 500 names."""
        found: dict[str, Job] = {}
        with self.reads.connect() as conn:
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
        if worker is not None:  # rank 0's worker, or any member's of a gang
            members = sa.select(t.job_members.c.job_id).where(t.job_members.c.worker == worker)
            q = q.where(sa.or_(t.jobs.c.worker == worker, t.jobs.c.id.in_(members)))
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
        self,
        limit: int,
        fits: Fits,
        after: tuple[int, int] | None = None,
        project: str | None = None,
    ) -> list[Job]:
        """Ready Pending jobs no bigger than `fits` (slots, GPUs, millicpus, memory), in
        the scheduler's order; with `project`, that project's only.

        `after` pages by keyset: the (priority, id) of the last job of the page before.
        Statements compiled once: a scheduling pass runs this on every change that frees
        room, and building the query each time cost more than running it.
        """
        params: dict[str, Any] = {"limit": limit, **fits._asdict()}
        hot = self._hot
        statement = hot.queue_first if project is None else hot.queue_first_of
        if after is not None:
            statement = hot.queue_after if project is None else hot.queue_after_of
            params["prio"], params["last_id"] = after
        if project is not None:
            params["project"] = project
        if self._batch is not None and hot.rowsets is not None:
            return self._queue_held(self._batch, hot.queue_held[statement], params)
        try:
            with self.reads.connect() as conn:
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

    @staticmethod
    def _queue_held(tx: Tx, statement: Compiled, params: dict[str, Any]) -> list[Job]:
        """The queue's page read in the batch's transaction (PostgreSQL), its rows locked
        for the binds the batch is about to make of them (`Tx.hold_jobs`)."""
        jobs = [Job.model_validate_json(row[0]) for row in tx.run(statement, params).fetchall()]
        for job in jobs:
            tx.hold(job.id, job.metadata.resource_version or 0)
        return jobs

    def hold_jobs(self, ids: Sequence[int]) -> None:
        """In a batch on PostgreSQL: lock these jobs now, in one statement, so that the
        batch's writes of them wait for no UPDATE each (statements.py, `Tx.hold_jobs`).
        Elsewhere nothing: SQLite's UPDATE costs microseconds, and outside a batch there
        is no transaction to hold them in."""
        if self._batch is not None and self._hot.rowsets is not None and ids:
            self._batch.hold_jobs(ids)

    def count_jobs_by_phase(self) -> dict[str, int]:
        q = sa.select(t.jobs.c.phase, sa.func.count()).group_by(t.jobs.c.phase)
        return {row[0]: int(row[1]) for row in self._rows(q)}

    def count_queued_ahead(self, priority: int, job_id: int) -> tuple[int, int]:
        """Counted off the queue's index (phase, ready, priority, id): no body is read."""
        jobs = t.jobs.c
        higher = sa.func.coalesce(sa.func.sum(sa.case((jobs.priority > priority, 1), else_=0)), 0)
        q = sa.select(sa.func.count(), higher).where(
            jobs.phase == Phase.PENDING.value,
            jobs.ready == sa.true(),
            sa.or_(jobs.priority > priority, sa.and_(jobs.priority == priority, jobs.id < job_id)),
        )
        row = self._rows(q)[0]
        return int(row[0]), int(row[1])

    def children_of(self, job_id: int) -> list[int]:
        q = sa.select(t.job_deps.c.child).where(t.job_deps.c.parent == job_id)
        return sorted(int(row.child) for row in self._rows(q))

    def parents(self) -> set[int]:
        return {int(row.parent) for row in self._rows(sa.select(t.job_deps.c.parent).distinct())}


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


def _write_members(conn: sa.Connection, job: Job) -> None:
    """The members' rows as `job` has them now (none once it is unbound or retried)."""
    conn.execute(_DELETE_MEMBERS, {"job_id": job.id})
    rows = [{"job_id": job.id, "rank": m.rank, "worker": m.worker} for m in job.status.members]
    if rows:
        conn.execute(t.job_members.insert(), rows)


def _job_row(job: Job) -> dict[str, Any]:
    return {
        "id": job.metadata.id,
        "uid": job.metadata.uid,
        "project": job.project,
        "name": job.metadata.name,
        "phase": str(job.status.phase),
        "priority": job.status.effective.priority,
        # Queued only once its parents ended and, retried, its backoff is over.
        "ready": job.status.ready,
        "slots": job.spec.resources.slots,
        "gpus": job.spec.resources.gpus,
        "millicpus": job.spec.resources.millicpus,
        "memory": job.spec.resources.memory_bytes,
        "worker": job.status.worker,
        "nominated_worker": job.status.nominated_worker,
        "owner": job.metadata.owner,
        "resource_version": job.metadata.resource_version,
        "body": to_json(job),
    }
