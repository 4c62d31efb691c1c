"""`spec.nodes` (issue 25) as the HTTP API takes it: OpenAPI says 1 to 1024, and a job
asking for 0, 1025 or a word is 422 naming the field, with nothing stored; the logs
routes' `rank` is bounded alike."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.integration.conftest import job_document

pytestmark = pytest.mark.anyio


def _schema(openapi: dict[str, Any], name: str) -> dict[str, Any]:
    found: dict[str, Any] = openapi["components"]["schemas"][name]
    return found


def _parameter(openapi: dict[str, Any], path: str, method: str, name: str) -> dict[str, Any]:
    parameters = openapi["paths"][path][method]["parameters"]
    found: dict[str, Any] = next(p for p in parameters if p["name"] == name)["schema"]
    return found


async def test_openapi_bounds_nodes_and_ranks(api: httpx.AsyncClient) -> None:
    openapi = (await api.get("/openapi.json")).json()
    nodes = _schema(openapi, "JobSpec")["properties"]["nodes"]
    assert (nodes["minimum"], nodes["maximum"], nodes["default"]) == (1, 1024, 1)
    appended = _parameter(openapi, "/jobs/{job_id}/logs", "post", "rank")
    assert (appended["minimum"], appended["exclusiveMaximum"]) == (0, 1024)
    read = _parameter(openapi, "/jobs/{job_id}/logs", "get", "rank")
    assert {"minimum": 0, "exclusiveMaximum": 1024} in [
        {k: v for k, v in arm.items() if k != "type"} for arm in read["anyOf"]
    ]


@pytest.mark.parametrize("nodes", [0, 1025, "x", -1, 2.5])
async def test_a_job_with_nodes_out_of_bounds_is_422_and_stores_nothing(
    api: httpx.AsyncClient, nodes: Any
) -> None:
    created = await api.post("/jobs", json=job_document("gang", nodes=nodes))
    assert created.status_code == 422 and "spec.nodes" in created.json()["detail"], created.text
    assert (await api.get("/jobs")).json()["items"] == []
