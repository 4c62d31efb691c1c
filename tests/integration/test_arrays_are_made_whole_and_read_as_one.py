"""A job array is created with all its members in one transaction, or not at all; it is
read back with its members' phases; `job apply` of the same array is `unchanged`; a job
depending on an array waits for every member; a finished array is deleted whole."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from jobd.api.models import Phase
from tests.integration.conftest import broker_state

pytestmark = pytest.mark.anyio


def _array(name: str | None = None, **array: Any) -> dict[str, Any]:
    metadata = {"project": "p", **({"name": name} if name else {})}
    spec = {"command": ["python", "train.py", "--lr", "{lr}", "--fold", "{i}"], "array": array}
    return {"apiVersion": "jobd/v1", "kind": "JobArray", "metadata": metadata, "spec": spec}


async def test_a_sweep_makes_one_member_per_combination(api: httpx.AsyncClient) -> None:
    sweep = [{"lr": lr, "seed": seed} for lr in ("1e-3", "3e-4") for seed in "123"]
    answer = await api.post("/arrays", json=_array("sweep-lr", sweep=sweep))
    assert answer.status_code == 201, answer.text
    created = answer.json()
    assert created["metadata"]["name"] == "sweep-lr"
    assert created["status"]["size"] == 6
    assert created["status"]["phases"] == {"Pending": 6}
    members = broker_state(api).store.get_jobs(created["status"]["jobs"])
    assert [j.metadata.name for j in members] == [f"sweep-lr-{i}" for i in range(6)]
    assert [j.spec.command[3] for j in members] == ["1e-3"] * 3 + ["3e-4"] * 3
    assert [j.spec.command[5] for j in members] == [str(i) for i in range(6)]
    assert all(j.metadata.labels["jobd/array"] == "sweep-lr" for j in members)
    assert [j.metadata.array.index for j in members if j.metadata.array] == list(range(6))
    again = await api.get(f"/arrays/{created['metadata']['id']}")
    assert again.json()["status"]["members"][2]["name"] == "sweep-lr-2"


async def test_an_array_without_a_name_is_named_for_its_id(api: httpx.AsyncClient) -> None:
    created = (await api.post("/arrays", json=_array(indices=[1, 3, 5]))).json()
    array_id = created["metadata"]["id"]
    assert created["metadata"]["name"] == f"array-{array_id}"
    names = [m["name"] for m in created["status"]["members"]]
    assert names == [f"array-{array_id}-{i}" for i in (1, 3, 5)]


async def test_a_refused_array_leaves_nothing(api: httpx.AsyncClient) -> None:
    taken = {"apiVersion": "jobd/v1", "kind": "Job", "metadata": {"name": "a-2", "project": "p"}}
    taken["spec"] = {"command": ["true"]}
    assert (await api.post("/jobs", json=taken)).status_code == 201
    answer = await api.post("/arrays", json=_array("a", indices=[0, 1, 2, 3]))
    assert answer.status_code == 409
    assert "a-2" in answer.json()["detail"]
    store = broker_state(api).store
    assert [j.metadata.name for j in store.list_jobs(project="p")] == ["a-2"]
    assert store.list_arrays() == []


@pytest.mark.parametrize(
    ("array", "said"),
    [
        ({"indices": "0-3"}, "short forms are for manifests"),  # over HTTP: a list
        ({"sweep": {"lr": ["1"]}}, "short forms are for manifests"),  # a list of members
        ({"indices": list(range(10_001))}, "10,000"),
        ({"indices": [0, 0]}, "twice"),
        ({"indices": [1_000_000]}, "999,999"),
        ({"sweep": [{"seed": 1}]}, "a value is a string"),
        ({"sweep": [{"i": "1"}]}, "{i} is the index"),
        ({"sweep": [{"lr": "1"}, {"lr": "1"}]}, "given twice"),
        ({"indices": [0, 1], "sweep": [{"lr": "1"}]}, "one of the two"),
        ({}, "one of the two"),
    ],
)
async def test_bad_arrays_are_refused_naming_the_field(
    api: httpx.AsyncClient, array: dict[str, Any], said: str
) -> None:
    answer = await api.post("/arrays", json=_array("bad", **array))
    assert answer.status_code == 422
    assert "spec.array" in answer.text and said in answer.text
    assert broker_state(api).store.list_jobs() == []


async def test_an_array_name_leaves_room_for_the_index(api: httpx.AsyncClient) -> None:
    answer = await api.post("/arrays", json=_array("a" * 57, indices=[0]))
    assert answer.status_code == 422 and "metadata.name" in answer.text
    assert "at most 56 characters" in answer.text
    assert (await api.post("/arrays", json=_array("a" * 56, indices=[999_999]))).status_code == 201


async def test_applying_an_array_twice_is_unchanged(api: httpx.AsyncClient) -> None:
    body = {"documents": [_array("sweep", sweep=[{"lr": "1"}, {"lr": "2"}])]}
    first = (await api.post("/apply", json=body)).json()["results"]
    second = (await api.post("/apply", json=body)).json()["results"]
    assert [r["action"] for r in first + second] == ["created", "unchanged"]
    assert first[0]["kind"] == "JobArray"
    changed = {"documents": [_array("sweep", sweep=[{"lr": "1"}, {"lr": "3"}])]}
    refused = await api.post("/apply", json=changed)
    assert refused.status_code == 409 and "does not change" in refused.text
    assert len(broker_state(api).store.list_jobs()) == 2


async def test_a_job_on_spec_array_is_an_array(api: httpx.AsyncClient) -> None:
    doc = _array("folds", indices=[0, 1, 2])
    doc["kind"] = "Job"
    results = (await api.post("/apply", json={"documents": [doc]})).json()["results"]
    assert results[0]["kind"] == "JobArray"
    assert len(broker_state(api).store.list_jobs()) == 3


async def test_a_child_of_an_array_has_every_member_for_parent(api: httpx.AsyncClient) -> None:
    created = (await api.post("/arrays", json=_array("par", indices=[0, 1, 2]))).json()
    members = created["status"]["jobs"]
    for ref in (f"A{created['metadata']['id']}", "par"):
        child = {"apiVersion": "jobd/v1", "kind": "Job", "metadata": {"project": "p"}}
        child["spec"] = {"command": ["true"], "depends_on": [ref]}
        answer = await api.post("/jobs", json=child)
        assert answer.status_code == 201, answer.text
        assert answer.json()["status"]["parents"] == members
    missing = {"command": ["true"], "depends_on": ["A999"]}
    orphan = {"apiVersion": "jobd/v1", "kind": "Job", "spec": missing}
    assert (await api.post("/jobs", json=orphan)).status_code == 404


async def test_only_a_finished_array_is_deleted_and_whole(api: httpx.AsyncClient) -> None:
    created = (await api.post("/arrays", json=_array("d", indices=[0, 1]))).json()
    array_id, members = created["metadata"]["id"], created["status"]["jobs"]
    refused = await api.delete(f"/arrays/{array_id}")
    assert refused.status_code == 409 and "cancel the array first" in refused.text
    assert (await api.post(f"/jobs/{members[0]}/cancel")).status_code == 200
    cancelled = (await api.post(f"/arrays/{array_id}/cancel")).json()
    assert cancelled["cancelled"] == members[1:]  # the one already cancelled is left
    assert cancelled["status"]["phases"] == {"Cancelled": 2}
    store = broker_state(api).store
    assert {j.status.phase for j in store.get_jobs(members)} == {Phase.CANCELLED}
    answer = await api.delete(f"/arrays/{array_id}")
    assert answer.json() == {"deleted": f"A{array_id}", "jobs": members}
    assert store.get_jobs(members) == [] and store.get_array(array_id) is None
    assert (await api.get(f"/arrays/{array_id}")).status_code == 404
