"""A job's owner is set by the broker from who made it, never taken from the body.

In-process on real SQLite, through the broker's own middleware and routes: a user
token's forged `metadata.owner` is dropped (it has no user yet: owner none), while the
admin token may submit on a user's behalf, as root may `sbatch --uid`. Hostile owner
names are refused with 422 naming the field.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from jobd.broker.state import BrokerConfig
from tests.integration.conftest import broker_client, job_document

pytestmark = pytest.mark.anyio

ADMIN = "an-admin-token-long-enough-for-anything-0123"


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    config = BrokerConfig(data_dir=tmp_path / "data", log_dir=tmp_path / "logs", token=ADMIN)
    async with broker_client(config) as c:
        yield c


def _owned(name: str, owner: str) -> dict[str, object]:
    doc = job_document(name)
    doc["metadata"]["owner"] = owner
    return doc


async def test_a_user_tokens_forged_owner_is_dropped(api: httpx.AsyncClient) -> None:
    made = await api.post("/tokens", json={"role": "user", "projects": ["default"]})
    user = {"Authorization": f"Bearer {made.json()['token']}"}
    job = await api.post("/jobs", json=_owned("forged", "root"), headers=user)
    assert job.status_code == 201, job.text
    assert "owner" not in job.json()["metadata"]
    applied = await api.post(
        "/apply", json={"documents": [_owned("forged-too", "root")]}, headers=user
    )
    assert applied.status_code == 200, applied.text
    listed = await api.get("/jobs", params={"name": "forged-too"})
    assert [j["metadata"].get("owner") for j in listed.json()["items"]] == [None]


async def test_the_admin_may_submit_on_a_users_behalf(api: httpx.AsyncClient) -> None:
    job = await api.post("/jobs", json=_owned("for-alice", "alice"))
    assert job.status_code == 201, job.text
    assert job.json()["metadata"]["owner"] == "alice"


@pytest.mark.parametrize("owner", ["../root", "al\x00ice", "a b", "9lives", "x" * 33])
async def test_hostile_owner_names_are_refused(api: httpx.AsyncClient, owner: str) -> None:
    refused = await api.post("/jobs", json=_owned("hostile", owner))
    assert refused.status_code == 422, refused.text
    assert "owner" in refused.text
