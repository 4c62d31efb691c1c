"""The store lists a multi-host job under each of its members' workers, on both backends.

A worker's jobs are looked up by name (its agent's list, a lost worker's jobs); a gang is
bound to each of its members' workers, rank 0's in `jobs.worker`, every rank's in
`job_members` (migration 0010), written only for jobs of more than one node. Unbound
(a retry, a lease lost before it started) it is listed under none; deleted, its rows go.
"""

from __future__ import annotations

from datetime import UTC, datetime

import sqlalchemy as sa

from jobd.api.models import Job, JobSpec, ObjectMeta, Phase
from jobd.controllers import transitions
from jobd.store import SQLStore
from jobd.store import schema as t
from tests.gang_binding import bind_gang

NOW = datetime(2026, 12, 5, tzinfo=UTC)


def _created(store: SQLStore, name: str, nodes: int) -> Job:
    job = Job(metadata=ObjectMeta(name=name), spec=JobSpec(command=["true"], nodes=nodes))
    return store.create_jobs([job])[0]


def _listed(store: SQLStore, worker: str) -> list[str]:
    return [j.metadata.name or "" for j in store.list_jobs(worker=worker)]


def _member_rows(store: SQLStore) -> int:
    with store.engine.connect() as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(t.job_members)).scalar())


def test_a_gang_is_listed_under_every_member_worker(store: SQLStore) -> None:
    single = _created(store, "single", 1)
    store.update_job(*transitions.bind(single, "b", [], NOW))
    gang = _created(store, "gang", 3)
    placements = [("a", None, []), ("b", None, []), ("c", None, [])]
    gang = store.update_job(*bind_gang(gang, placements, NOW))
    assert _listed(store, "a") == ["gang"]
    assert _listed(store, "b") == ["single", "gang"]
    assert _listed(store, "c") == ["gang"]
    assert [j.metadata.name for j in store.list_jobs(worker="c", phases=[Phase.SCHEDULED])] == [
        "gang"
    ]
    assert _member_rows(store) == 3

    store.update_job(*transitions.unbind(gang, NOW))
    assert _listed(store, "c") == [] and _listed(store, "b") == ["single"]
    assert _member_rows(store) == 0


def test_a_job_of_one_node_writes_no_member_rows_and_a_deleted_gang_leaves_none(
    store: SQLStore,
) -> None:
    single = _created(store, "single", 1)
    store.update_job(*transitions.bind(single, "a", [], NOW))
    assert _member_rows(store) == 0
    gang = _created(store, "gang", 2)
    gang = store.update_job(*bind_gang(gang, [("a", None, []), ("b", None, [])], NOW))
    store.delete_job(store.update_job(*transitions.cancel(gang, NOW)))
    assert _member_rows(store) == 0 and _listed(store, "b") == []
