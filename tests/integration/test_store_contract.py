"""The Store contract, held by SQLStore on SQLite and on PostgreSQL alike.

Every test that takes the `store` fixture runs once per backend (see tests/conftest.py);
the PostgreSQL run gets a database of its own. The crash test kills a real writer process
with SIGKILL and checks what a restarted broker would find.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.config import Config

import jobd.store
from jobd.api.models import (
    Job,
    JobSpec,
    ObjectMeta,
    Phase,
    Project,
    ProjectSpec,
    Resources,
    Worker,
    WorkerSpec,
    dump,
)
from jobd.controllers import transitions
from jobd.store import (
    Change,
    Conflict,
    EventRecord,
    Fits,
    Gone,
    NotFound,
    SQLStore,
    open_store,
)
from jobd.store import schema as t
from jobd.store.base import Receipt

# The store's contract is tested with made-up events: it stores any, whatever they say.
pytestmark = pytest.mark.forged_events


def make_job(
    name: str | None = None,
    project: str = "default",
    *,
    priority: int = 0,
    phase: Phase = Phase.PENDING,
    worker: str | None = None,
    nominated: str | None = None,
    ready: bool = True,
    parents: Sequence[int] = (),
) -> Job:
    job = Job(metadata=ObjectMeta(name=name, project=project), spec=JobSpec(command=["true"]))
    job.status.effective.priority = priority
    job.status.phase = phase
    job.status.worker = worker
    job.status.nominated_worker = nominated
    job.status.dependencies_met = ready
    job.status.parents = list(parents)
    return job


def create(store: SQLStore, job: Job) -> Job:
    (created,) = store.create_jobs([job])
    return created


def ids(jobs: Sequence[Job]) -> list[int]:
    return [job.id for job in jobs]


class Recorder:
    """A commit listener that keeps what it heard and what a fresh read saw meanwhile."""

    def __init__(self, store: SQLStore) -> None:
        self.store = store
        self.calls: list[tuple[list[Change], list[EventRecord]]] = []
        self.seen_versions: list[int | None] = []

    def __call__(self, changes: Sequence[Change], events: Sequence[EventRecord]) -> None:
        self.calls.append((list(changes), list(events)))
        for change in changes:
            if change.kind == "Job" and change.op != "DELETED":
                live = self.store.get_job(int(change.key))
                self.seen_versions.append(live.metadata.resource_version if live else None)


# -- create_jobs -------------------------------------------------------------------------


def test_create_assigns_server_fields(store: SQLStore) -> None:
    before = store.revision()
    job = create(store, make_job("train"))

    assert job.metadata.id is not None and job.metadata.id > 0
    assert uuid.UUID(job.metadata.uid or "")
    assert job.metadata.generation == 1
    assert isinstance(job.metadata.created_at, datetime)
    assert job.metadata.resource_version == before + 1 == store.revision()
    assert store.get_job(job.id) == job
    assert store.get_job_by_name("default", "train") == job


def test_batch_create_takes_one_revision_per_job(store: SQLStore) -> None:
    jobs = store.create_jobs([make_job("a"), make_job("b"), make_job("c")])

    versions = [job.metadata.resource_version for job in jobs]
    assert versions == [versions[0], versions[0] + 1, versions[0] + 2]
    assert store.revision() == versions[-1]
    assert ids(jobs) == sorted(set(ids(jobs)))
    assert len({job.metadata.uid for job in jobs}) == 3


def test_unnamed_jobs_are_named_after_their_id(store: SQLStore) -> None:
    first, second = store.create_jobs([make_job(), make_job()])

    for job in (first, second):
        assert job.metadata.name == f"job-{job.id}"
        stored = store.get_job(job.id)
        assert stored is not None and stored.metadata.name == f"job-{job.id}"
        assert store.get_job_by_name("default", f"job-{job.id}") == job


def test_name_is_unique_per_project(store: SQLStore) -> None:
    create(store, make_job("train"))
    create(store, make_job("train", project="vision"))  # another project: fine
    revision = store.revision()

    with pytest.raises(Conflict):
        create(store, make_job("train"))
    # A batch is all or nothing: the good job before the duplicate is not kept either.
    with pytest.raises(Conflict):
        store.create_jobs([make_job("fresh"), make_job("dup"), make_job("dup")])

    assert store.get_job_by_name("default", "fresh") is None
    assert store.get_job_by_name("default", "dup") is None
    assert store.revision() == revision
    assert len(store.list_jobs()) == 2


def test_a_refused_batch_takes_back_the_names_it_made(store: SQLStore) -> None:
    create(store, make_job("dup"))
    unnamed, dup = make_job(), make_job("dup")

    with pytest.raises(Conflict):
        store.create_jobs([unnamed, dup])
    assert unnamed.metadata.name is None  # not job-<an id that was never committed>

    (again,) = store.create_jobs([unnamed])
    assert again.metadata.name == f"job-{again.id}"


# -- update_job / delete_job -------------------------------------------------------------


def test_update_is_compare_and_swap(store: SQLStore) -> None:
    job = create(store, make_job("train"))
    winner, loser = job.model_copy(deep=True), job.model_copy(deep=True)

    winner.status.phase = Phase.SCHEDULED
    winner.status.worker = "gpu-1"
    updated = store.update_job(winner)
    assert updated.metadata.resource_version == store.revision()
    assert updated.metadata.resource_version > (job.metadata.resource_version or 0)

    revision = store.revision()
    loser.status.phase = Phase.CANCELLED
    with pytest.raises(Conflict):
        store.update_job(loser)

    assert store.revision() == revision
    assert store.changes_since(revision) == []
    assert store.get_job(job.id) == updated
    assert store.list_jobs(worker="gpu-1") == [updated]


def test_update_of_a_deleted_job_is_not_found(store: SQLStore) -> None:
    job = create(store, make_job("train"))
    store.delete_job(job)

    assert store.get_job(job.id) is None
    with pytest.raises(NotFound):
        store.update_job(job)


def test_delete_is_compare_and_swap(store: SQLStore) -> None:
    job = create(store, make_job("train"))
    newer = store.update_job(job)

    with pytest.raises(Conflict):
        store.delete_job(job)
    assert store.get_job(job.id) == newer
    store.delete_job(newer)
    with pytest.raises(NotFound):
        store.delete_job(newer)


def test_expire_removes_the_job_its_events_and_dependency_rows_and_adds_its_own(
    store: SQLStore,
) -> None:
    parent = create(store, make_job("prep"))
    child = make_job("train")
    child.spec.depends_on = [parent.id]
    child = create(store, child)
    store.update_job(child, [EventRecord("scheduled", job=child.id, worker="w")])
    other = create(store, make_job("other"))
    store.update_job(other, [EventRecord("scheduled", job=other.id, worker="w")])
    child = store.get_job(child.id)
    assert child is not None
    expired = EventRecord("job_expired", job=child.id, fields={"ttl_s": 60.0})
    store.expire_job(child, [expired])

    assert store.get_job(child.id) is None
    assert [e.event for e in store.list_events(job=child.id)] == ["job_expired"]
    assert store.list_events(job=other.id), "other jobs' events stay"
    assert store.children_of(parent.id) == []
    assert store.changes_since(0)[-1].op == "DELETED"


def test_expire_is_compare_and_swap(store: SQLStore) -> None:
    job = create(store, make_job("train"))
    newer = store.update_job(job, [EventRecord("scheduled", job=job.id)])
    with pytest.raises(Conflict):
        store.expire_job(job, [EventRecord("job_expired", job=job.id)])
    assert store.get_job(job.id) == newer
    assert [e.event for e in store.list_events(job=job.id)][-1] == "scheduled", "nothing lost"
    store.expire_job(newer)
    with pytest.raises(NotFound):
        store.expire_job(newer)


def _secret_job(name: str) -> Job:
    job = make_job(name)
    job.spec.env = {"HF_TOKEN": "hf-real", "EPOCHS": "3"}
    return job


def _history(store: SQLStore, job: Job) -> list[tuple[str, bool]]:
    """The env of each change of `job` the feed keeps, and its `secret` flag, in order."""
    query = sa.select(t.changes.c.body, t.changes.c.secret).where(t.changes.c.key == str(job.id))
    with store.engine.connect() as conn:
        rows = conn.execute(query.order_by(t.changes.c.revision)).all()
    return [(json.loads(body)["spec"]["env"]["HF_TOKEN"], bool(flag)) for body, flag in rows]


def test_an_ended_jobs_history_keeps_no_secret(store: SQLStore) -> None:
    """The change feed's earlier versions of a job are masked when it ends (its row is
    masked by the transition itself), found by their flag, on either backend."""
    job = create(store, _secret_job("train"))
    running = job.evolve()
    running.status.phase = Phase.RUNNING
    running = store.update_job(running)
    assert _history(store, job) == [("hf-real", True)] * 2

    ended, events = transitions.finish(running, Phase.SUCCEEDED, datetime.now(UTC))
    store.update_job(ended, events)
    assert _history(store, job) == [("***", False)] * 3
    assert (store.get_job(job.id) or job).spec.env == {"HF_TOKEN": "***", "EPOCHS": "3"}


def test_a_preempted_jobs_history_keeps_its_secrets_until_it_is_deleted(
    store: SQLStore,
) -> None:
    job = create(store, _secret_job("train"))
    preempted, events = transitions.finish(job, Phase.PREEMPTED, datetime.now(UTC))
    preempted = store.update_job(preempted, events)
    assert _history(store, job) == [("hf-real", True)] * 2

    store.delete_job(preempted)
    assert _history(store, job) == [("***", False)] * 3  # the DELETED change too


# -- revisions and the change feed -------------------------------------------------------


def test_revisions_increase_across_kinds_and_feed_replays_them(store: SQLStore) -> None:
    start = store.revision()
    job = create(store, make_job("train"))
    project = store.put_project(Project(metadata=ObjectMeta(name="vision")))
    worker = store.put_worker(Worker(metadata=ObjectMeta(name="gpu-1")))
    job.status.phase = Phase.RUNNING
    job = store.update_job(job)
    project.spec.priority = 7
    project = store.put_project(project)
    worker.spec.slots = 4
    worker = store.put_worker(worker)
    store.delete_job(job)

    changes = store.changes_since(start)
    versions = [change.revision for change in changes]
    assert versions == sorted(set(versions)) and versions[0] > start
    assert versions[-1] == store.revision()
    assert [(c.kind, c.op, c.key) for c in changes] == [
        ("Job", "ADDED", str(job.id)),
        ("Project", "ADDED", "vision"),
        ("Worker", "ADDED", "gpu-1"),
        ("Job", "MODIFIED", str(job.id)),
        ("Project", "MODIFIED", "vision"),
        ("Worker", "MODIFIED", "gpu-1"),
        ("Job", "DELETED", str(job.id)),
    ]
    assert changes[3].body == dump(job)
    assert changes[3].body["status"]["phase"] == "Running"
    assert changes[4].body == dump(project)
    assert changes[5].body == dump(worker)
    assert changes[6].body["metadata"]["resource_version"] == job.metadata.resource_version
    for change in changes:
        assert change.body["metadata"]["resource_version"] in (change.revision, versions[3])

    # Exactly the later changes, in order.
    assert store.changes_since(versions[2]) == changes[3:]
    assert store.changes_since(versions[-1]) == []
    assert store.changes_since(start, limit=2) == changes[:2]


def test_compact_drops_old_changes_and_old_revisions_are_gone(store: SQLStore) -> None:
    start = store.revision()
    jobs = store.create_jobs([make_job(f"j{i}") for i in range(5)])
    versions = [job.metadata.resource_version or 0 for job in jobs]

    assert store.compact(keep=2) == 3

    for compacted in (start, versions[0], versions[1]):
        with pytest.raises(Gone):
            store.changes_since(compacted)
    kept = store.changes_since(versions[2])
    assert [change.revision for change in kept] == versions[3:]
    assert store.compact(keep=2) == 0


def test_compacting_everything_still_reports_gone(store: SQLStore) -> None:
    jobs = store.create_jobs([make_job(f"j{i}") for i in range(3)])
    store.compact(keep=0)

    with pytest.raises(Gone):
        store.changes_since(jobs[0].metadata.resource_version or 0)
    assert store.changes_since(store.revision()) == []
    newer = create(store, make_job("after"))
    assert [c.revision for c in store.changes_since(jobs[-1].metadata.resource_version or 0)] == [
        newer.metadata.resource_version
    ]


# -- queries ------------------------------------------------------------------------------


def test_list_jobs_filters(store: SQLStore) -> None:
    pending = create(store, make_job("pending", priority=1))
    waiting = create(store, make_job("waiting", ready=False))
    nominated = create(store, make_job("nominated", nominated="gpu-2"))
    running = create(store, make_job("running", phase=Phase.RUNNING, worker="gpu-1"))
    other = create(store, make_job("other", "vision", phase=Phase.SCHEDULED, worker="gpu-2"))

    assert store.list_jobs() == [pending, waiting, nominated, running, other]
    assert store.list_jobs(project="vision") == [other]
    assert store.list_jobs(phases=[Phase.PENDING]) == [pending, waiting, nominated]
    assert store.list_jobs(phases=[Phase.RUNNING, Phase.SCHEDULED]) == [running, other]
    assert store.list_jobs(phases=[]) == []
    assert store.list_jobs(worker="gpu-2") == [other]
    assert store.list_jobs(ready=False) == [waiting]
    assert store.list_jobs(ready=True, phases=[Phase.PENDING]) == [pending, nominated]
    assert store.list_jobs(nominated=True) == [nominated]
    assert nominated not in store.list_jobs(nominated=False)
    assert store.list_jobs(after_id=running.id) == [other]
    assert store.list_jobs(limit=2) == [pending, waiting]


def test_the_queue_head_pages_by_keyset_in_priority_order(store: SQLStore) -> None:
    jobs = store.create_jobs(
        [make_job(f"p{i}", priority=prio) for i, prio in enumerate([5, 10, 5, 1, 10, 5])]
    )
    expected = sorted(jobs, key=lambda j: (-j.status.effective.priority, j.id))
    fits = Fits(1, 0)  # every job here asks for one slot and no GPU

    assert store.list_jobs(by_priority=True) == expected
    pages: list[list[Job]] = []
    after: tuple[int, int] | None = None
    while page := store.queue_head(4 if not pages else 2, fits, after):
        pages.append(page)
        after = (page[-1].status.effective.priority, page[-1].id)
    assert [len(page) for page in pages] == [4, 2]
    assert [job for page in pages for job in page] == expected
    assert store.queue_head(10, fits, after=(5, jobs[2].id)) == expected[4:]


def test_children_come_from_status_parents(store: SQLStore) -> None:
    first, second = store.create_jobs([make_job("first"), make_job("second")])
    both = create(store, make_job("both", parents=[first.id, second.id], ready=False))
    only = create(store, make_job("only", parents=[first.id], ready=False))

    assert store.children_of(first.id) == [both.id, only.id]
    assert store.children_of(second.id) == [both.id]
    assert store.children_of(both.id) == []
    store.delete_job(both)
    assert store.children_of(second.id) == []
    assert store.children_of(first.id) == [only.id]


def test_count_jobs_by_phase(store: SQLStore) -> None:
    assert store.count_jobs_by_phase() == {}
    store.create_jobs(
        [
            make_job("a"),
            make_job("b"),
            make_job("c", phase=Phase.RUNNING, worker="gpu-1"),
            make_job("d", phase=Phase.SUCCEEDED),
        ]
    )
    assert store.count_jobs_by_phase() == {"Pending": 2, "Running": 1, "Succeeded": 1}


# -- events and listeners -----------------------------------------------------------------


def test_events_commit_with_their_write(store: SQLStore) -> None:
    jobs = store.create_jobs(
        [make_job("a"), make_job("b")],
        events_for=lambda job: [EventRecord("submitted", job=job.id, fields={"name": job.ref})],
    )
    job = jobs[0]
    job.status.phase = Phase.SCHEDULED
    job = store.update_job(job, [EventRecord("scheduled", job=job.id, worker="gpu-1")])

    events = store.list_events()
    assert [(e.event, e.job) for e in events] == [
        ("submitted", jobs[0].id),
        ("submitted", jobs[1].id),
        ("scheduled", jobs[0].id),
    ]
    assert [e.seq for e in events] == sorted(set(e.seq for e in events))
    assert events[0].fields == {"name": "default/a"}
    assert events[2].worker == "gpu-1"
    assert all(e.ts.endswith("Z") for e in events)
    assert events[2].as_json() == {
        "ts": events[2].ts,
        "event": "scheduled",
        "job": jobs[0].id,
        "worker": "gpu-1",
    }


def test_a_failed_write_commits_no_events(store: SQLStore) -> None:
    job = create(store, make_job("a"))
    store.update_job(job)
    before = store.list_events()

    with pytest.raises(Conflict):
        store.update_job(job, [EventRecord("scheduled", job=job.id)])
    with pytest.raises(Conflict):
        store.create_jobs(
            [make_job("b"), make_job("a")],
            events_for=lambda j: [EventRecord("submitted", job=j.id)],
        )

    assert store.list_events() == before == []


def test_list_events_filters(store: SQLStore) -> None:
    a, b = store.create_jobs(
        [make_job("a"), make_job("b")],
        events_for=lambda job: [EventRecord("submitted", job=job.id)],
    )
    store.append_events(
        [EventRecord("started", job=a.id), EventRecord("lease_lost", worker="gpu-1")]
    )
    every = store.list_events()

    assert [e.event for e in store.list_events(job=a.id)] == ["submitted", "started"]
    assert [e.job for e in store.list_events(event="submitted")] == [a.id, b.id]
    assert store.list_events(job=b.id, event="started") == []
    assert store.list_events(after_seq=every[1].seq) == every[2:]
    assert store.list_events(after_seq=every[0].seq, limit=2) == every[1:3]
    assert store.list_events(after_seq=every[-1].seq) == []


def test_the_last_event_seq_is_where_new_events_start(store: SQLStore) -> None:
    assert store.last_event_seq() == 0
    store.append_events([EventRecord("one"), EventRecord("two")])
    last = store.last_event_seq()

    store.append_events([EventRecord("three")])

    assert [e.event for e in store.list_events(after_seq=last)] == ["three"]
    assert store.last_event_seq() == last + 1


def test_a_batch_commits_once_and_a_refused_write_inside_changes_nothing(
    store: SQLStore,
) -> None:
    a, b = store.create_jobs([make_job("a"), make_job("b")])
    heard = Recorder(store)
    store.subscribe(heard)
    with store.batch():
        running = a.evolve()
        running.status.phase = Phase.RUNNING
        running = store.update_job(running, [EventRecord("started", job=a.id)])
        assert store.get_job(a.id) == a  # not committed yet: others still read the old one
        stale = b.evolve()
        stale.metadata = stale.metadata.model_copy(update={"resource_version": 1})
        with pytest.raises(Conflict):
            store.update_job(stale)
        done = running.evolve()
        done.status.phase = Phase.SUCCEEDED
        done = store.update_job(done, [EventRecord("finished", job=a.id)])
        store.append_events([EventRecord("shipped", worker="w1")])
    assert len(heard.calls) == 1  # one commit, heard once, after it landed
    changes, events = heard.calls[0]
    assert [c.revision for c in changes] == [
        running.metadata.resource_version,
        done.metadata.resource_version,
    ]
    assert [e.event for e in events] == ["started", "finished", "shipped"]
    assert heard.seen_versions == [done.metadata.resource_version] * 2
    assert store.get_job(b.id) == b


def test_a_job_written_twice_in_a_batch_refuses_a_swap_from_before_the_batch(
    store: SQLStore,
) -> None:
    """Inside a batch a job's newest version is the batch's own (its row is written once,
    at the commit): a swap from the version before it is stale, as it is outside; the
    feed keeps every version, and the counters go on from where the batch left them."""
    (a,) = store.create_jobs([make_job("a")])
    with store.batch():
        running = a.evolve()
        running.status.phase = Phase.RUNNING
        running = store.update_job(running, [EventRecord("started", job=a.id)])
        late = a.evolve()  # a writer that read the job before the batch's write
        late.status.phase = Phase.CANCELLED
        with pytest.raises(Conflict):
            store.update_job(late)
        done = running.evolve()
        done.status.phase = Phase.SUCCEEDED
        done = store.update_job(done, [EventRecord("finished", job=a.id)])
    assert store.get_job(a.id) == done
    revisions = [c.revision for c in store.changes_since(a.metadata.resource_version or 0)]
    assert revisions[-2:] == [running.metadata.resource_version, done.metadata.resource_version]
    after = done.evolve()
    after.status.message = "after the batch"
    after = store.update_job(after, [EventRecord("noted", job=a.id)])
    assert (after.metadata.resource_version or 0) > (done.metadata.resource_version or 0)
    assert store.revision() == after.metadata.resource_version
    seqs = [e.seq for e in store.list_events(job=a.id)]
    assert seqs == sorted(set(seqs)) and len(seqs) == 3


def test_a_batch_that_fails_rolls_back_whole(store: SQLStore) -> None:
    (a,) = store.create_jobs([make_job("a")])
    before = store.revision()
    with pytest.raises(RuntimeError, match="boom"), store.batch():
        running = a.evolve()
        running.status.phase = Phase.RUNNING
        store.update_job(running, [EventRecord("started", job=a.id)])
        raise RuntimeError("boom")
    assert store.get_job(a.id) == a
    assert store.revision() == before
    assert [e.event for e in store.list_events(job=a.id)] == []
    running = a.evolve()  # and the store takes writes again, outside any batch
    running.status.phase = Phase.RUNNING
    assert store.update_job(running).status.phase == Phase.RUNNING


def test_listeners_hear_each_commit_after_it_lands(store: SQLStore) -> None:
    heard = Recorder(store)
    store.subscribe(heard)

    jobs = store.create_jobs(
        [make_job("a"), make_job("b")],
        events_for=lambda job: [EventRecord("submitted", job=job.id)],
    )
    assert len(heard.calls) == 1
    changes, events = heard.calls[0]
    assert [(c.op, c.key) for c in changes] == [("ADDED", str(j.id)) for j in jobs]
    assert [c.body for c in changes] == [dump(j) for j in jobs]
    assert events == store.list_events()
    # The listener read the job back through another connection: already committed.
    assert heard.seen_versions == [j.metadata.resource_version for j in jobs]

    job = jobs[0]
    updated = store.update_job(job, [EventRecord("scheduled", job=job.id)])
    assert len(heard.calls) == 2
    changes, events = heard.calls[1]
    assert [(c.op, c.revision) for c in changes] == [
        ("MODIFIED", updated.metadata.resource_version)
    ]
    assert [e.event for e in events] == ["scheduled"]
    assert heard.seen_versions[-1] == updated.metadata.resource_version

    with pytest.raises(Conflict):
        store.update_job(job, [EventRecord("cancelled", job=job.id)])
    with pytest.raises(Conflict):
        store.create_jobs([make_job("a")])
    assert len(heard.calls) == 2


# -- projects and workers -----------------------------------------------------------------


def put(store: SQLStore, obj: Project | Worker) -> Project | Worker:
    return store.put_project(obj) if isinstance(obj, Project) else store.put_worker(obj)


def get(store: SQLStore, obj: Project | Worker) -> Project | Worker | None:
    return store.get_project(obj.name) if isinstance(obj, Project) else store.get_worker(obj.name)


def change_spec(obj: Project | Worker) -> Project | Worker:
    changed = obj.model_copy(deep=True)
    if isinstance(changed, Project):
        changed.spec.priority += 1
    else:
        changed.spec.slots += 1
    return changed


@pytest.mark.parametrize(
    "new",
    [
        pytest.param(
            Project(metadata=ObjectMeta(name="vision"), spec=ProjectSpec(priority=3)), id="project"
        ),
        pytest.param(
            Worker(metadata=ObjectMeta(name="gpu-1"), spec=WorkerSpec(slots=2)), id="worker"
        ),
    ],
)
def test_put_creates_then_compares_and_swaps(store: SQLStore, new: Project | Worker) -> None:
    created = put(store, new)
    assert created.metadata.resource_version == store.revision()
    assert created.metadata.generation == 1 and created.metadata.uid
    assert get(store, new) == created
    with pytest.raises(Conflict):
        put(store, new)  # resource_version None again: it already exists

    winner = put(store, change_spec(created))
    assert (winner.metadata.resource_version or 0) > (created.metadata.resource_version or 0)
    revision = store.revision()
    with pytest.raises(Conflict):
        put(store, change_spec(created))  # stale resource_version
    assert store.revision() == revision
    assert get(store, new) == winner
    listed = store.list_projects() if isinstance(new, Project) else store.list_workers()
    assert listed == [winner]


def test_project_delete_is_compare_and_swap(store: SQLStore) -> None:
    project = store.put_project(Project(metadata=ObjectMeta(name="vision")))
    newer = store.put_project(project)

    with pytest.raises(Conflict):
        store.delete_project(project)
    store.delete_project(newer)
    assert store.get_project("vision") is None


# -- lifecycle ----------------------------------------------------------------------------


def test_migrate_is_idempotent(store: SQLStore, store_url: str) -> None:
    job = create(store, make_job("train"))
    revision = store.revision()

    store.migrate()
    again = open_store(store_url)
    try:
        again.migrate()
        assert again.ping()
        assert again.revision() == revision
        assert again.get_job(job.id) == job
        assert create(again, make_job("next")).metadata.resource_version == revision + 1
    finally:
        again.close()


def _indexes(store: SQLStore) -> set[str]:
    """How each index of the jobs table is defined, as the database itself says."""
    if store.url.startswith("sqlite"):
        query = "SELECT sql FROM sqlite_master WHERE tbl_name = 'jobs' AND sql IS NOT NULL"
    else:
        query = "SELECT indexdef FROM pg_indexes WHERE tablename = 'jobs'"
    with store.engine.connect() as conn:
        return {row[0] for row in conn.exec_driver_sql(query) if "INDEX" in row[0]}


def _downgrade(store: SQLStore, revision: str) -> None:
    cfg = Config()
    cfg.set_main_option("script_location", str(Path(jobd.store.__file__).parent / "migrations"))
    with store.engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, revision)


def test_an_older_store_migrates_to_the_schema_of_a_new_one(
    store: SQLStore, store_url: str
) -> None:
    """A store with jobs in it, taken down to the first release's schema, upgraded in place.

    (Today's code writes columns the first release's tables lack, so the jobs are
    written first and the schema taken down under them.)
    """
    fresh = _indexes(store)
    assert any("priority DESC" in ix for ix in fresh)  # the queue's order, read off the index
    jobs = store.create_jobs([make_job("a"), make_job("b", nominated="w")])
    _downgrade(store, "0001")
    old = SQLStore(store_url)
    try:
        old.migrate()
        assert _indexes(old) == fresh
        assert [old.get_job(job.id) for job in jobs] == jobs
        assert create(old, make_job("c")).id == jobs[-1].id + 1
    finally:
        old.close()


def test_gpu_jobs_of_an_older_store_take_no_slot_once_migrated(
    store: SQLStore, store_url: str
) -> None:
    """Before 0006 a job took a slot per GPU; the queue's read skips a job by its slots."""
    gpu_job = make_job("gpu")
    gpu_job.spec.resources = Resources(gpus=2)
    [gpu_job] = store.create_jobs([gpu_job])
    _downgrade(store, "0005")
    old = SQLStore(store_url)
    try:
        with old.engine.connect() as conn:  # (today's queue read names 0007's columns)
            slots = conn.execute(sa.select(t.jobs.c.slots)).scalar_one()
        assert slots == 2, "the old row asks for two slots"
        old.migrate()
        assert old.queue_head(10, Fits(0, 2)) == [gpu_job], "every slot taken, two GPUs free"
    finally:
        old.close()


def test_jobs_of_an_older_store_hold_no_cpus_nor_memory_once_migrated(
    store: SQLStore, store_url: str
) -> None:
    """Before 0007 no job named CPUs or memory: its row is filled with none of either."""
    [old_job] = store.create_jobs([make_job("old")])
    _downgrade(store, "0006")
    old = SQLStore(store_url)
    try:
        old.migrate()
        [big] = old.create_jobs([_resized(make_job("big"), cpus=2, memory="1GiB")])
        no_room = Fits(1, 0, millicpus=0, memory=0)
        assert old.queue_head(10, no_room) == [old_job], "the old job holds none"
        room = Fits(1, 0, millicpus=2000, memory=1 << 30)
        assert old.queue_head(10, room) == [old_job, big]
        assert old.queue_head(10, room._replace(millicpus=1999)) == [old_job]
        assert old.queue_head(10, room._replace(memory=(1 << 30) - 1)) == [old_job]
    finally:
        old.close()


def _resized(job: Job, **resources: Any) -> Job:
    job.spec.resources = Resources(**resources)
    return job


def test_checkpoints_from_another_thread_lose_no_write(store: SQLStore) -> None:
    """The broker copies SQLite's log back from a thread while its loop goes on writing."""
    stop = threading.Event()

    def checkpoint_until_stopped() -> None:
        while not stop.wait(0.002):
            store.checkpoint()

    thread = threading.Thread(target=checkpoint_until_stopped)
    thread.start()
    try:
        created = [store.create_jobs([make_job(f"j{i}-{k}") for k in range(20)]) for i in range(30)]
    finally:
        stop.set()
        thread.join()
    store.checkpoint()

    assert len(store.list_jobs()) == 600 == sum(len(batch) for batch in created)
    if store.url.startswith("sqlite"):
        with store.engine.connect() as conn:
            busy, logged, copied = conn.exec_driver_sql("PRAGMA wal_checkpoint").one()
            assert conn.exec_driver_sql("PRAGMA integrity_check").scalar() == "ok"
        assert busy == 0 and logged == copied  # everything written is in the file


# -- crash safety (SQLite: the file is the whole database) -------------------------------

BATCH = 10
_WRITER = """
import sys, time
from jobd.api.models import Job, JobSpec, ObjectMeta, Phase
from jobd.store import EventRecord, open_store

store = open_store(sys.argv[1])
block_in_batch = int(sys.argv[2])  # -1: never block, write until killed

def events_for(job, state={"n": 0}):
    state["n"] += 1
    if state["n"] == block_in_batch * BATCH + BATCH // 2:
        print("inside", flush=True)  # inside the batch's transaction: rows written, not committed
        time.sleep(60)
    return [EventRecord("submitted", job=job.id)]

for batch in range(10_000):
    jobs = [Job(metadata=ObjectMeta(project="default"), spec=JobSpec(command=["true"]))
            for _ in range(BATCH)]
    created = store.create_jobs(jobs, events_for=events_for)
    for job in created[::2]:
        job.status.phase = Phase.RUNNING
        job.status.worker = "gpu-1"
        job = store.update_job(job, [EventRecord("started", job=job.id)])
    print(job.metadata.resource_version, flush=True)
""".replace("BATCH", str(BATCH))


def _run_writer_and_kill(url: str, block_in_batch: int) -> int:
    """Start the writer, SIGKILL it mid-way; return the last revision it saw committed."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _WRITER, url, str(block_in_batch)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    watchdog = threading.Timer(30, proc.kill)
    watchdog.start()
    acked = 0
    try:
        assert proc.stdout is not None and proc.stderr is not None
        for line in proc.stdout:
            if line.strip() == "inside":
                break
            acked = int(line)
            if block_in_batch < 0 and acked > 60:
                time.sleep(random.uniform(0, 0.02))  # land anywhere in the write path
                break
        proc.send_signal(signal.SIGKILL)
        assert proc.wait() == -signal.SIGKILL, proc.stderr.read()
        acked = max([acked, *(int(x) for x in proc.stdout.read().split() if x.isdigit())])
    finally:
        watchdog.cancel()
        proc.kill()
        proc.wait()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
    return acked


@pytest.mark.parametrize("when", ["inside-a-transaction", "anywhere"])
def test_killed_writer_leaves_a_consistent_store(tmp_path: Path, when: str) -> None:
    url = f"sqlite:///{tmp_path}/jobd.db"
    acked = _run_writer_and_kill(url, block_in_batch=3 if when != "anywhere" else -1)
    assert acked > 0

    store = open_store(url)
    try:
        with store.engine.connect() as conn:
            assert conn.execute(sa.text("PRAGMA integrity_check")).scalar() == "ok"
            rows = list(conn.execute(sa.select(t.jobs)))
            feed = {r.key: r for r in conn.execute(sa.select(t.changes).order_by("revision"))}
            event_jobs = [r.job for r in conn.execute(sa.select(t.events))]
        revision = store.revision()

        assert revision >= acked  # every acknowledged write survived
        assert rows and len(rows) % BATCH == 0  # a batch lands whole or not at all
        if when == "inside-a-transaction":
            assert len(rows) == 3 * BATCH and revision == acked
        for row in rows:
            job = Job.model_validate_json(row.body)
            assert (job.id, job.metadata.name, str(job.status.phase)) == (
                row.id,
                row.name,
                row.phase,
            )
            assert job.metadata.resource_version == row.resource_version <= revision
            assert feed[str(row.id)].revision == row.resource_version
            assert Job.model_validate(json.loads(feed[str(row.id)].body)) == job
        assert max(int(r.revision) for r in feed.values()) == revision
        assert event_jobs.count(None) == 0 and set(event_jobs) == {row.id for row in rows}

        # And it takes writes again, numbered after everything that survived.
        job = create(store, make_job("after-crash"))
        assert job.metadata.resource_version == revision + 1
        assert store.update_job(job).metadata.resource_version == revision + 2
    finally:
        store.close()


def test_a_delivery_is_claimed_once_and_only_when_its_batch_commits(store: SQLStore) -> None:
    assert store.receipt_of("w1", "reports") is None
    with store.batch():
        assert store.claim_delivery("w1", "reports", "run1", 1)
        assert not store.claim_delivery("w1", "reports", "run1", 1)  # in the same batch
    assert not store.claim_delivery("w1", "reports", "run1", 1)  # sent again
    assert store.claim_delivery("w1", "reports", "run1", 2)  # the next: moved on
    assert not store.claim_delivery("w1", "reports", "run1", 1)  # an older one
    assert store.claim_delivery("w1", "events", "run1", 1)  # each stream its own
    assert store.claim_delivery("w1", "reports", "run2", 1)  # a new run of the agent
    assert store.receipt_of("w1", "reports") == Receipt("w1", "reports", "run2", 1)
    with pytest.raises(RuntimeError), store.batch():
        assert store.claim_delivery("w1", "reports", "run2", 2)
        raise RuntimeError("the batch fails")
    assert store.receipt_of("w1", "reports") == Receipt("w1", "reports", "run2", 1)
    assert store.claim_delivery("w1", "reports", "run2", 2)  # rolled back: not applied
