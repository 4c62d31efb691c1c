"""Resources, selectors and worker inventories that cannot mean anything are 422 naming
the field (issue 23): negative CPUs, no memory, more memory than any host, a selector
key with a NUL or `=`, a label no selector could match; the store is left as it was."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.integration.conftest import job_document

pytestmark = pytest.mark.anyio

HOSTILE: list[tuple[dict[str, Any], str]] = [
    ({"resources": {"cpus": -1}}, "spec.resources.cpus"),
    ({"resources": {"cpus": 0}}, "spec.resources.cpus"),
    ({"resources": {"cpus": True}}, "spec.resources.cpus"),
    ({"resources": {"memory": 0}}, "spec.resources.memory"),
    ({"resources": {"memory": "0GiB"}}, "spec.resources.memory"),
    ({"resources": {"memory": 10**30}}, "spec.resources.memory"),
    ({"node_selector": {"gpu\x00": "a100"}}, "spec.node_selector"),
    ({"node_selector": {"gpu=model": "a100"}}, "spec.node_selector"),
    ({"node_selector": {"gpu": "a 100"}}, "spec.node_selector"),
    ({"node_affinity": [{"key": "site", "operator": "In"}]}, "spec.node_affinity"),
    ({"node_affinity": [{"key": "a=b", "operator": "Exists"}]}, "spec.node_affinity"),
    ({"node_affinity": [{"key": "site", "operator": "Near", "values": ["x"]}]}, "node_affinity"),
    ({"worker": "No Such Name!"}, "spec.worker"),
]


@pytest.mark.parametrize(("spec", "field"), HOSTILE)
async def test_create_and_apply_refuse_it_naming_the_field(
    api: httpx.AsyncClient, spec: dict[str, Any], field: str
) -> None:
    created = await api.post("/jobs", json=job_document("hostile", **spec))
    applied = await api.post("/apply", json={"documents": [job_document("hostile", **spec)]})
    assert created.status_code == 422 and field in created.json()["detail"], created.text
    assert applied.status_code == 422 and field in applied.json()["detail"], applied.text
    assert (await api.get("/jobs")).json()["items"] == []


async def test_what_may_be_said_is_taken_as_said(api: httpx.AsyncClient) -> None:
    spec = {
        "resources": {"cpus": 0.5, "memory": "512MiB"},
        "node_selector": {"gpu.model": "A100-SXM4-80GB", "example.com/site": "lab2"},
        "node_affinity": [
            {"key": "site", "operator": "NotIn", "values": ["lab1", "lab3"]},
            {"key": "scratch", "operator": "Exists"},
        ],
        "worker": "GPU-Box.lab",
    }
    created = await api.post("/jobs", json=job_document("fine", **spec))
    assert created.status_code == 201, created.text
    said = created.json()["spec"]
    assert said["resources"] == {"cpus": 0.5, "memory": 512 << 20, "gpus": 0}
    assert said["worker"] == "gpu-box.lab", "worker names are lower-cased, as the workers'"


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"cpus": -1}, "spec.cpus"),
        ({"memory": 10**30}, "spec.memory"),
        ({"labels": {"a=b": "c"}}, "spec.labels"),
        ({"labels": {"gpu": "a\x00"}}, "spec.labels"),
        ({"mount_roots": ["data"]}, "spec.mount_roots"),
        ({"enforcement": {"cpu": "affinity", "memory": "cgroup-v3"}}, "spec.enforcement"),
        ({"enforcement": {"cpu": "pinned"}}, "spec.enforcement"),
    ],
)
async def test_a_worker_registering_a_hostile_inventory_is_refused(
    api: httpx.AsyncClient, spec: dict[str, Any], field: str
) -> None:
    body = {"spec": spec, "hostname": "h", "runner": "r"}
    registered = await api.put("/workers/w9", json=body)
    assert registered.status_code == 422 and field in registered.json()["detail"], registered.text


@pytest.mark.parametrize("cpuset", [[-1], [8192], ["0"], [True]])
async def test_a_started_report_with_cores_no_host_has_is_refused(
    api: httpx.AsyncClient, cpuset: list[Any]
) -> None:
    created = await api.post("/jobs", json=job_document("pinned"))
    job_id = created.json()["metadata"]["id"]
    body = {"worker": "w9", "attempt": 1, "cpuset": cpuset}
    said = await api.post(f"/jobs/{job_id}/started", json=body)
    assert said.status_code == 422 and "cpuset" in said.json()["detail"], said.text
    assert "cpuset" not in (await api.get(f"/jobs/{job_id}")).json()["status"]
