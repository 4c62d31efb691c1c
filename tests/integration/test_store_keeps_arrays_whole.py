"""The store's side of job arrays, on SQLite and PostgreSQL alike (the `store` fixture):
an array and its members are one commit; a refused one leaves no member, no array and
no used name; arrays are found by id and by name."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from jobd.api.arrays import ArrayMeta, ArraySpec, JobArray, JobArraySpec
from jobd.api.models import ArrayRef, Job, JobSpec, ObjectMeta, Phase
from jobd.store import Change, Conflict, EventRecord, SQLStore


def _array(name: str, size: int, project: str = "p") -> tuple[JobArray, list[Job]]:
    spec = JobArraySpec(command=["true"], array=ArraySpec(indices=list(range(size))))
    array = JobArray(metadata=ArrayMeta(name=name, project=project), spec=spec)
    members = [
        Job(metadata=ObjectMeta(project=project), spec=JobSpec(command=["true"]))
        for _ in range(size)
    ]
    return array, members


def _namer(array: JobArray, members: list[Job]) -> Callable[[int], None]:
    """What admission gives the store: names the members once the array's id is known."""

    def on_id(array_id: int) -> None:
        name = array.metadata.name or ""
        for i, job in enumerate(members):
            job.metadata.name = f"{name}-{i}"
            job.metadata.array = ArrayRef(id=array_id, name=name, index=i)

    return on_id


def test_an_array_and_its_members_are_one_commit(store: SQLStore) -> None:
    heard: list[list[Change]] = []
    store.subscribe(lambda changes, _events: heard.append(list(changes)))
    array, members = _array("a", 3)
    created = store.create_array(array, members, _namer(array, members))
    assert len(heard) == 1 and [c.key for c in heard[0]] == [str(j.id) for j in members]
    assert created.status.jobs == [j.id for j in members]
    assert store.get_array(created.id) == created == store.get_array_by_name("p", "a")
    assert store.list_arrays(projects=["q"]) == []
    stored = store.get_jobs(created.status.jobs)
    assert [j.metadata.array.index for j in stored if j.metadata.array] == [0, 1, 2]
    ids = [*created.status.jobs, 999_999]  # the phases of those stored, by one light read
    assert store.phases_of(ids) == dict.fromkeys(created.status.jobs, Phase.PENDING)


@pytest.mark.forged_events
def test_a_refused_array_leaves_nothing_and_its_name_free(store: SQLStore) -> None:
    taken = Job(metadata=ObjectMeta(name="b-1", project="p"), spec=JobSpec(command=["true"]))
    (taken,) = store.create_jobs([taken])
    revision = store.revision()
    array, members = _array("b", 2)
    with pytest.raises(Conflict, match="b-1"):
        store.create_array(
            array,
            members,
            _namer(array, members),
            events_for=lambda job: [EventRecord("job_created", job=job.id)],
        )
    assert [j.id for j in store.list_jobs()] == [taken.id]
    assert store.list_arrays() == [] and store.revision() == revision
    assert store.list_events(event="job_created") == []
    array, members = _array("b", 1)  # b-0 only: the array's name was never taken
    assert store.create_array(array, members, _namer(array, members)).metadata.name == "b"


def test_an_array_name_is_unique_per_project(store: SQLStore) -> None:
    array, members = _array("c", 1)
    store.create_array(array, members, _namer(array, members))
    again, others = _array("c", 1)
    others[0].metadata.name = "free"  # the member's name is free; the array's is not
    with pytest.raises(Conflict, match="array p/c already exists"):
        store.create_array(again, others, lambda _id: None)
    elsewhere, theirs = _array("c", 1, project="q")
    assert store.create_array(elsewhere, theirs, _namer(elsewhere, theirs)).project == "q"
