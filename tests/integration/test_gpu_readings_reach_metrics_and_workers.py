"""What a worker's heartbeat says of its GPUs (NVML's memory in use and utilisation) reaches
`/metrics` as `jobd_gpu_*` beside each GPU's total and the job holding it, and the worker
documents `job top` reads (`status.gpu_usage`); a worker that cannot measure (a declared
inventory) exports its totals and holders only, and a Lost worker's old reading is gone."""

from __future__ import annotations

import os
import shutil
import subprocess

import httpx
import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from jobd.api.models import Phase, WorkerPhase
from tests.integration.conftest import broker_state, job_document

pytestmark = pytest.mark.anyio

GIB = 1 << 30
OPENMETRICS = {"Accept": "application/openmetrics-text; version=1.0.0"}
REGISTRATION = {
    "spec": {"slots": 1, "gpus": [0, 1], "gpu_memory": {"0": 24 * GIB, "1": 80 * GIB}},
    "hostname": "gpu-box",
    "runner": "procgroup",
}
READING = {"0": {"memory_used": 3 * GIB, "utilization": 0.25}, "1": {"memory_used": 70 * GIB}}

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


async def _gpu_samples(api: httpx.AsyncClient) -> Samples:
    text = (await api.get("/metrics", headers=OPENMETRICS)).text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name.startswith("jobd_gpu_")
    }


def _gpu(index: int, **more: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted({"worker": "gpu-box", "gpu": str(index), **more}.items()))


async def _worker_with_a_job_on_gpu_1(api: httpx.AsyncClient) -> int:
    assert (await api.put("/workers/gpu-box", json=REGISTRATION)).status_code == 200
    created = await api.post("/jobs", json=job_document("train", resources={"gpus": 1}))
    job_id = int(created.json()["metadata"]["id"])
    store = broker_state(api).store
    bound = store.get_job(job_id)
    assert bound is not None
    bound = bound.evolve()
    bound.status.phase, bound.status.worker, bound.status.gpus = Phase.RUNNING, "gpu-box", [1]
    store.update_job(bound)
    return job_id


async def test_a_reading_reaches_metrics_with_totals_and_the_holder(api: httpx.AsyncClient) -> None:
    job_id = await _worker_with_a_job_on_gpu_1(api)
    beat = await api.post("/workers/gpu-box/heartbeat", json={"running": [], "gpu_usage": READING})
    assert beat.status_code == 200, beat.text

    samples = await _gpu_samples(api)
    holder = {"job_id": str(job_id), "job_name": "default/train", "project": "default"}
    assert samples == {
        ("jobd_gpu_memory_total_bytes", _gpu(0)): 24 * GIB,
        ("jobd_gpu_memory_total_bytes", _gpu(1)): 80 * GIB,
        ("jobd_gpu_memory_used_bytes", _gpu(0)): 3 * GIB,
        ("jobd_gpu_memory_used_bytes", _gpu(1)): 70 * GIB,
        ("jobd_gpu_utilization_ratio", _gpu(0)): 0.25,  # GPU 1's NVML said no utilisation
        ("jobd_gpu_job_info", _gpu(1, **holder)): 1.0,
    }
    [worker] = (await api.get("/workers")).json()["items"]
    assert worker["status"]["gpu_usage"] == {
        "0": {"memory_used": 3 * GIB, "utilization": 0.25},
        "1": {"memory_used": 70 * GIB},
    }
    one = (await api.get("/workers/gpu-box")).json()
    assert one["status"]["gpu_usage"] == worker["status"]["gpu_usage"]
    stored = broker_state(api).store.get_worker("gpu-box")
    assert stored is not None and stored.status.gpu_usage == {}, "a reading is never stored"


async def test_a_declared_inventory_exports_totals_and_holders_only(
    api: httpx.AsyncClient,
) -> None:
    job_id = await _worker_with_a_job_on_gpu_1(api)
    await api.post("/workers/gpu-box/heartbeat", json={"running": [], "gpu_usage": READING})
    # A later heartbeat without a reading (NVML gone) forgets the last one.
    await api.post("/workers/gpu-box/heartbeat", json={"running": []})
    names = {(name, dict(labels).get("job_id")) for name, labels in await _gpu_samples(api)}
    assert names == {
        ("jobd_gpu_memory_total_bytes", None),
        ("jobd_gpu_job_info", str(job_id)),
    }
    [worker] = (await api.get("/workers")).json()["items"]
    assert worker["status"]["gpu_usage"] == {}


async def test_a_lost_workers_reading_is_not_exported(api: httpx.AsyncClient) -> None:
    await _worker_with_a_job_on_gpu_1(api)
    await api.post("/workers/gpu-box/heartbeat", json={"running": [], "gpu_usage": READING})
    store = broker_state(api).store
    lost = store.get_worker("gpu-box")
    assert lost is not None
    lost.status.phase = WorkerPhase.LOST
    store.put_worker(lost)
    names = {name for name, _ in await _gpu_samples(api)}
    assert names == {"jobd_gpu_memory_total_bytes", "jobd_gpu_job_info"}


async def test_a_reading_out_of_range_is_refused(api: httpx.AsyncClient) -> None:
    assert (await api.put("/workers/gpu-box", json=REGISTRATION)).status_code == 200
    for bad in ({"0": {"memory_used": -1}}, {"0": {"memory_used": 1, "utilization": 1.5}}):
        beat = await api.post("/workers/gpu-box/heartbeat", json={"running": [], "gpu_usage": bad})
        assert beat.status_code == 422, beat.text


async def test_promtool_checks_the_gpu_families_clean(api: httpx.AsyncClient) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        reason = "promtool is not installed (Debian: apt-get install prometheus)"
        if os.environ.get("CI", "").lower() in {"true", "1"}:
            pytest.fail(f"CI=true and {reason}", pytrace=False)
        pytest.skip(reason)
    await _worker_with_a_job_on_gpu_1(api)
    await api.post("/workers/gpu-box/heartbeat", json={"running": [], "gpu_usage": READING})
    text = (await api.get("/metrics")).text
    assert "jobd_gpu_job_info{" in text and "jobd_gpu_utilization_ratio{" in text
    checked = subprocess.run(
        [promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=30
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
