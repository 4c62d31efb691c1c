"""A job's webhook URLs (spec.notify) are secrets: masked on every read, kept to the end.

Through the broker's real routes on real SQLite: a job's notify URL and secret read as
the mask (get, list, watch, apply's answer); a masked read applied back changes nothing
and keeps the stored URL; the mask is no URL for a new job (422 naming the field); a bad
URL or too many targets are refused (422); when the job ends its URL stays in the store,
where the outbox reads it for the end's notification, while its env secrets go.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from jobd.api.models import MAX_NOTIFY_TARGETS
from jobd.api.secrets import MASK
from jobd.broker.state import BrokerConfig
from tests.integration.conftest import broker_client, job_document

pytestmark = pytest.mark.anyio

ADMIN = "an-admin-token-long-enough-for-anything-0123"
URL = "https://hooks.example.com/services/T000/B000/XXXXsecretpath"
TARGET = {"url": URL, "on": ["Failed", "Succeeded"], "format": "slack", "secret": "k3y"}


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    config = BrokerConfig(data_dir=tmp_path / "data", log_dir=tmp_path / "logs", token=ADMIN)
    async with broker_client(config) as c:
        yield c


def _doc(name: str = "train", *targets: dict[str, Any]) -> dict[str, Any]:
    doc = job_document(name, env={"HF_TOKEN": "hf_real"})
    doc["spec"]["notify"] = list(targets) or [TARGET]
    return doc


def _row(tmp_path: Path, job_id: int) -> dict[str, Any]:
    with sqlite3.connect(tmp_path / "data" / "jobd.db") as db:
        (body,) = db.execute("SELECT body FROM jobs WHERE id = ?", (job_id,)).fetchone()
    found: dict[str, Any] = json.loads(body)
    return found


async def test_every_read_masks_the_url_and_apply_keeps_it(
    api: httpx.AsyncClient, tmp_path: Path
) -> None:
    made = await api.post("/jobs", json=_doc())
    assert made.status_code == 201, made.text
    job_id = made.json()["metadata"]["id"]
    masked = {**TARGET, "url": MASK, "secret": MASK}
    assert made.json()["spec"]["notify"] == [masked]
    assert (await api.get(f"/jobs/{job_id}")).json()["spec"]["notify"] == [masked]
    listed = (await api.get("/jobs")).text
    watched = (await api.get("/watch", params={"since": 0, "timeout": 0})).text
    assert URL not in listed and URL not in watched and "k3y" not in watched

    read_back = (await api.get(f"/jobs/{job_id}")).json()
    applied = await api.post("/apply", json={"documents": [read_back]})
    assert applied.status_code == 200, applied.text
    assert applied.json()["results"][0]["action"] == "unchanged"
    assert _row(tmp_path, job_id)["spec"]["notify"] == [TARGET]

    fresh = await api.post("/jobs", json=_doc("fresh", {"url": MASK}))
    assert fresh.status_code == 422 and "spec.notify" in fresh.json()["detail"]


async def test_bad_targets_are_refused_naming_the_field(api: httpx.AsyncClient) -> None:
    for targets, said in [
        ([{"url": "ftp://example.com/x"}], "spec.notify.0.url"),
        ([{"url": URL, "on": ["Scheduled"]}], "spec.notify.0.on"),
        ([{"url": URL, "format": "teams"}], "spec.notify.0.format"),
        ([{"url": URL + "x" * 2100}], "spec.notify.0.url"),
        ([{"url": URL}] * (MAX_NOTIFY_TARGETS + 1), "spec.notify"),
    ]:
        refused = await api.post("/jobs", json=_doc("bad", *targets))
        assert refused.status_code == 422, targets
        assert said in refused.json()["detail"]


async def test_an_ended_job_keeps_its_url_for_its_notification(
    api: httpx.AsyncClient, tmp_path: Path
) -> None:
    job_id = (await api.post("/jobs", json=_doc())).json()["metadata"]["id"]
    assert (await api.post(f"/jobs/{job_id}/cancel")).is_success
    stored = _row(tmp_path, job_id)
    assert stored["status"]["phase"] == "Cancelled"
    assert stored["spec"]["env"] == {"HF_TOKEN": MASK}  # env secrets leave at the end
    assert stored["spec"]["notify"] == [TARGET]  # the URL stays: the end is its use
    assert (await api.get(f"/jobs/{job_id}")).json()["spec"]["notify"][0]["url"] == MASK
