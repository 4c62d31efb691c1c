"""/metrics of the in-process app: each app counts only its own requests and events (tests
and embedders build many in one process), and requests are labelled by route template,
never by raw path, so the label set stays bounded whatever clients send."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from jobd.broker.state import BrokerConfig
from tests.integration.conftest import TOKEN, broker_client, job_document

pytestmark = pytest.mark.anyio

OPENMETRICS = {"Accept": "application/openmetrics-text; version=1.0.0"}


async def _samples(api: httpx.AsyncClient) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = (await api.get("/metrics", headers=OPENMETRICS)).text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _requests(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], route: str) -> float:
    return sum(
        v
        for (name, labels), v in samples.items()
        if name == "jobd_http_requests_total" and ("route", route) in labels
    )


async def test_two_apps_count_apart_and_label_by_template(
    api: httpx.AsyncClient, tmp_path: Path
) -> None:
    created = await api.post("/jobs", json=job_document("one"))
    assert created.status_code == 201
    for job_id in (created.json()["metadata"]["id"], 999_999):
        await api.get(f"/jobs/{job_id}")
    await api.get("/no/such/path/12345")
    samples = await _samples(api)
    assert samples[("jobd_jobs_created_total", ())] == 1
    assert _requests(samples, "/jobs/{job_id}") == 2  # found and not found, one label
    assert _requests(samples, "other") == 1
    assert not any("12345" in str(labels) for _, labels in samples)

    other = BrokerConfig(data_dir=tmp_path / "d2", log_dir=tmp_path / "l2", token=TOKEN)
    async with broker_client(other) as second:
        fresh = await _samples(second)
    assert fresh[("jobd_jobs_created_total", ())] == 0
    assert _requests(fresh, "/jobs/{job_id}") == 0


async def test_the_plain_text_scrape_keeps_the_first_names(api: httpx.AsyncClient) -> None:
    response = await api.get("/metrics")
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    text = response.text
    assert "# TYPE jobd_store_revision gauge" in text
    assert 'jobd_jobs{phase="Pending"} 0.0' in text
    assert 'jobd_build_info{python="' in text
