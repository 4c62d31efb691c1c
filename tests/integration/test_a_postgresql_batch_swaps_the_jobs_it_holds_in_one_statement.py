"""On PostgreSQL a batch locks the jobs it is about to write, and writes them at its end.

A worker's report batch names its jobs (`hold_jobs`), and a scheduling pass reads the
queue's page inside its transaction, locked: each compare-and-swap of those jobs is then
checked against the version the lock found, with no UPDATE waited for each, and the jobs'
rows go as one statement with the change feed's, the events' and the COMMIT (one round
trip). The compare-and-swap's promises hold as before: a stale write is a Conflict and
the rest of the batch commits; a held row that moved all the same (a fault of jobd's)
fails the whole transaction rather than losing a write.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from jobd.api.models import Job, JobSpec, ObjectMeta, Phase
from jobd.store import Conflict, EventRecord, Fits, SQLStore, normalize_url
from jobd.store import schema as t
from jobd.store.sql import _Tx
from jobd.store.sql.statements import Compiled

# The events here are made up: the store keeps any.
pytestmark = [pytest.mark.postgres, pytest.mark.forged_events]


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The SQL of each statement the store's transactions run on their own cursor."""
    seen: list[str] = []
    run = _Tx.run

    def counted(tx: _Tx, statement: Compiled, row: dict[str, object]) -> object:
        seen.append(statement.sql)
        return run(tx, statement, row)

    monkeypatch.setattr(_Tx, "run", counted)
    yield seen


def _created(store: SQLStore, n: int) -> list[Job]:
    jobs = [
        Job(metadata=ObjectMeta(project="default"), spec=JobSpec(command=["true"]))
        for _ in range(n)
    ]
    return store.create_jobs(jobs)


def _moved(job: Job, phase: Phase = Phase.SCHEDULED) -> Job:
    changed = job.evolve()
    changed.status.phase = phase
    changed.status.worker = "w1"
    return changed


def test_held_jobs_are_written_at_the_end_without_an_update_each(
    pg_store: SQLStore, sent: list[str]
) -> None:
    jobs = _created(pg_store, 3)
    before = pg_store.revision()
    with pg_store.batch():
        pg_store.hold_jobs([job.id for job in jobs])
        written = [pg_store.update_job(_moved(job)) for job in jobs]
        again = pg_store.update_job(_moved(written[0], Phase.RUNNING))
    assert pg_store._hot.update_job.sql not in sent
    assert [job.status.phase for job in pg_store.get_jobs([job.id for job in jobs])] == [
        Phase.RUNNING,
        Phase.SCHEDULED,
        Phase.SCHEDULED,
    ]
    assert pg_store.get_job(jobs[0].id) == again
    changes = pg_store.changes_since(before)
    assert [(c.key, c.revision) for c in changes] == [
        (str(job.id), job.metadata.resource_version) for job in [*written, again]
    ]


def test_a_stale_write_of_a_held_job_is_a_conflict_and_the_batch_goes_on(
    pg_store: SQLStore,
) -> None:
    stale, kept = _created(pg_store, 2)
    elsewhere = pg_store.update_job(_moved(stale))
    with pg_store.batch():
        pg_store.hold_jobs([stale.id, kept.id])
        with pytest.raises(Conflict):
            pg_store.update_job(_moved(stale, Phase.RUNNING))
        done = pg_store.update_job(_moved(kept))
    assert pg_store.get_job(stale.id) == elsewhere
    assert pg_store.get_job(kept.id) == done


def test_a_held_row_that_moved_fails_the_whole_commit(pg_store: SQLStore) -> None:
    job, other = _created(pg_store, 2)
    before = pg_store.revision()
    with pytest.raises(RuntimeError, match="changed under it"), pg_store.batch():
        pg_store.hold_jobs([job.id, other.id])
        pg_store.update_job(_moved(other))  # the holds go with this write's first statement
        tx = pg_store._batch
        assert tx is not None
        # Behind the transaction's back: nothing in jobd writes a row it holds.
        tx.conn.execute(sa.update(t.jobs).where(t.jobs.c.id == job.id).values(resource_version=0))
        pg_store.update_job(_moved(job))
    assert pg_store.get_jobs([job.id, other.id]) == [job, other]
    assert pg_store.revision() == before
    for _ in range(10):  # every pooled connection left usable: the failed one rolled back
        assert pg_store.get_job(job.id) == job
    assert pg_store.update_job(_moved(job)).metadata.resource_version == before + 1


def _locked_elsewhere(url: str, job_id: int) -> bool:
    other = sa.create_engine(normalize_url(url), poolclass=sa.pool.NullPool)
    try:
        with other.connect() as conn:
            query = sa.select(t.jobs.c.id).where(t.jobs.c.id == job_id).with_for_update(nowait=True)
            try:
                conn.execute(query)
            except sa.exc.OperationalError:
                return True
            return False
    finally:
        other.dispose()


def test_the_queue_read_in_a_batch_holds_what_it_read(
    pg_store: SQLStore, postgres_url: str, sent: list[str]
) -> None:
    first, second = _created(pg_store, 2)
    assert not _locked_elsewhere(postgres_url, first.id)
    with pg_store.batch():
        page = pg_store.queue_head(1, Fits(1, 0))
        assert page == [first]
        assert _locked_elsewhere(postgres_url, first.id)
        assert not _locked_elsewhere(postgres_url, second.id), "only the page's rows"
        bound = pg_store.update_job(_moved(page[0]))
    assert not _locked_elsewhere(postgres_url, first.id)
    assert pg_store.get_job(first.id) == bound
    assert pg_store._hot.update_job.sql not in sent


def test_a_write_with_events_locks_its_counters_in_one_statement(
    pg_store: SQLStore, sent: list[str]
) -> None:
    (job,) = _created(pg_store, 1)
    seq = pg_store.last_event_seq()
    sent.clear()
    events = [EventRecord("job_bound", job=job.id, worker="w1") for _ in range(2)]
    moved = pg_store.update_job(_moved(job), events)
    hot = pg_store._hot
    assert sent.count(hot.hold_counters.sql) + sent.count(hot.hold_counters_fenced.sql) == 1
    assert hot.reserve.sql not in sent
    assert [ev.seq for ev in pg_store.list_events(job=job.id)][-2:] == [seq + 1, seq + 2]
    assert pg_store.revision() == moved.metadata.resource_version


def test_jobs_created_as_one_statement_still_refuse_a_name_taken(pg_store: SQLStore) -> None:
    def named(name: str) -> Job:
        return Job(metadata=ObjectMeta(project="default", name=name), spec=JobSpec(command=["t"]))

    first = pg_store.create_jobs([named("a"), named("b")])
    before = pg_store.revision()
    with pytest.raises(Conflict, match="job default/b already exists"):
        pg_store.create_jobs([named("c"), named("b")])
    assert pg_store.revision() == before
    assert pg_store.get_jobs_by_name("default", ["a", "b", "c"]) == {"a": first[0], "b": first[1]}
