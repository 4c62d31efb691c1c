"""A create is judged against the registered workers' shapes (placement.py), which the
broker's view works out once and keeps until a worker changes: a job too big for every
worker is said Unschedulable at once, and once a worker that can hold it registers, the
next such create is not (the kept shapes were dropped with the change)."""

from __future__ import annotations

from itertools import count
from typing import Any

import httpx
import pytest

from tests.integration.conftest import broker_state, job_document

pytestmark = pytest.mark.anyio
_names = (f"big-{i}" for i in count())


def _registration(gpus: int) -> dict[str, Any]:
    return {"spec": {"slots": 2, "gpus": list(range(gpus))}, "hostname": "h", "runner": "sim"}


async def _scheduled_condition(api: httpx.AsyncClient) -> dict[str, Any] | None:
    resp = await api.post("/jobs", json=job_document(next(_names), resources={"gpus": 2}))
    assert resp.status_code == 201, resp.text
    conditions = resp.json()["status"].get("conditions", [])
    return next((c for c in conditions if c["type"] == "Scheduled"), None)


async def test_the_fleets_shapes_are_kept_until_a_worker_changes(api: httpx.AsyncClient) -> None:
    assert (await api.put("/workers/small", json=_registration(1))).status_code == 200
    said = await _scheduled_condition(api)
    assert said is not None and said["reason"] == "Unschedulable"
    assert said["message"] == "no worker has 2 GPUs; the largest has 1"
    again = await _scheduled_condition(api)
    assert again is not None and again["message"] == said["message"], "nothing changed"
    assert (await api.put("/workers/large", json=_registration(2))).status_code == 200
    holds = await _scheduled_condition(api)
    assert holds is None or holds["reason"] != "Unschedulable", "the new worker holds it"
    assert (await api.put("/workers/large", json=_registration(1))).status_code == 200
    said = await _scheduled_condition(api)
    assert said is not None and said["message"] == "no worker has 2 GPUs; the largest has 1"
    assert len(broker_state(api).ctx.view.workers) == 2
