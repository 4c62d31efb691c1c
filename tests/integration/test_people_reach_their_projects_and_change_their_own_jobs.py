"""People: a user token of a user reaches its user's projects and changes only their jobs.

In-process on real SQLite, through the broker's own middleware and routes. The users
are names only (none of them exists on this host, so each is a member by name, with no
groups): what the Unix socket adds — the uid from the kernel — is tested end to end in
tests/e2e/test_people_over_the_unix_socket.py. A worker's vouching for a user is here
too: users only, never root, and never a worker's route.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from jobd.broker.state import BrokerConfig
from tests.integration.conftest import broker_client, job_document

pytestmark = pytest.mark.anyio

ADMIN = "an-admin-token-long-enough-for-anything-0123"
PROJECTS = {
    "shared": {"members": ["alice", "bob"]},
    "bobs": {"members": ["bob"]},
    "run-by-carol": {"members": ["alice"], "admins": ["carol"]},
}


def _project(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "jobd/v1", "kind": "Project", "metadata": {"name": name}, "spec": spec}


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    config = BrokerConfig(data_dir=tmp_path / "data", log_dir=tmp_path / "logs", token=ADMIN)
    async with broker_client(config) as c:
        documents = [_project(name, spec) for name, spec in PROJECTS.items()]
        applied = await c.post("/apply", json={"documents": documents})
        assert applied.status_code == 200, applied.text
        yield c


async def _token(api: httpx.AsyncClient, **fields: Any) -> dict[str, str]:
    made = await api.post("/tokens", json={"role": "user", **fields})
    assert made.status_code == 201, made.text
    return {"Authorization": f"Bearer {made.json()['token']}"}


async def _submit(api: httpx.AsyncClient, who: dict[str, str], project: str, name: str) -> int:
    doc = job_document(name, cwd="/tmp")
    doc["metadata"] |= {"project": project, "owner": "root"}  # a forged owner, dropped
    made = await api.post("/jobs", json=doc, headers=who)
    assert made.status_code == 201, made.text
    return int(made.json()["metadata"]["id"])


async def _phase(api: httpx.AsyncClient, job_id: int) -> str:
    return str((await api.get(f"/jobs/{job_id}")).json()["status"]["phase"])


async def test_a_user_sees_only_their_projects_and_owns_what_they_submit(
    api: httpx.AsyncClient,
) -> None:
    alice, bob = await _token(api, user="alice"), await _token(api, user="bob")
    mine = await _submit(api, alice, "shared", "a1")
    await _submit(api, bob, "shared", "b1")
    hidden = await _submit(api, bob, "bobs", "b2")
    listed = (await api.get("/jobs", headers=alice)).json()["items"]
    assert {(j["metadata"]["project"], j["metadata"]["owner"]) for j in listed} == {
        ("shared", "alice"),
        ("shared", "bob"),
    }
    assert (await api.get(f"/jobs/{mine}")).json()["metadata"]["owner"] == "alice"
    refused = await api.get(f"/jobs/{hidden}", headers=alice)
    assert refused.status_code == 403
    assert "not a member of project 'bobs'" in refused.json()["detail"]
    outside = await api.post("/jobs", json=job_document("x", cwd="/tmp"), headers=alice)
    assert outside.status_code == 403  # `default` names no members: admins only
    who = (await api.get("/whoami", headers=alice)).json()
    assert (who["user"], who["via"], who["admin"]) == ("alice", "token", False)
    assert who["projects"] == ["run-by-carol", "shared"]


async def test_a_member_cannot_change_anothers_job_and_nothing_changes(
    api: httpx.AsyncClient,
) -> None:
    alice, bob = await _token(api, user="alice"), await _token(api, user="bob")
    theirs = await _submit(api, bob, "shared", "b1")
    for verb in ("cancel", "preempt"):
        refused = await api.post(f"/jobs/{theirs}/{verb}", headers=alice)
        assert refused.status_code == 403, refused.text
        assert "'bob''s" in refused.json()["detail"]
        assert "changes only their own jobs" in refused.json()["detail"]
    assert (await api.delete(f"/jobs/{theirs}", headers=alice)).status_code == 403
    relabelled = job_document("b1", cwd="/tmp")
    relabelled["metadata"] |= {"project": "shared", "labels": {"mine": "now"}}
    applied = await api.post("/apply", json={"documents": [relabelled]}, headers=alice)
    assert applied.status_code == 403, applied.text
    assert await _phase(api, theirs) == "Pending"
    job = (await api.get(f"/jobs/{theirs}")).json()
    assert job["metadata"].get("labels", {}) == {} and job["metadata"]["owner"] == "bob"
    assert (await api.post(f"/jobs/{theirs}/cancel", headers=bob)).status_code == 200
    assert await _phase(api, theirs) == "Cancelled"


async def test_a_project_admin_changes_any_of_its_jobs(api: httpx.AsyncClient) -> None:
    alice, carol = await _token(api, user="alice"), await _token(api, user="carol")
    job = await _submit(api, alice, "run-by-carol", "a1")
    assert (await api.post(f"/jobs/{job}/cancel", headers=carol)).status_code == 200
    assert await _phase(api, job) == "Cancelled"
    who = (await api.get("/whoami", headers=carol)).json()
    assert who["admin_of"] == ["run-by-carol"]


async def test_a_tokens_projects_narrow_its_users(api: httpx.AsyncClient) -> None:
    narrowed = await _token(api, user="alice", projects=["shared", "bobs"])
    who = (await api.get("/whoami", headers=narrowed)).json()
    assert who["projects"] == ["shared"]  # never further than alice herself reaches
    doc = job_document("a1", cwd="/tmp")
    doc["metadata"]["project"] = "run-by-carol"
    assert (await api.post("/jobs", json=doc, headers=narrowed)).status_code == 403


@pytest.mark.parametrize("user", ["../root", "al\x00ice", "a/b", "x" * 33, ""])
async def test_a_hostile_user_name_is_refused_and_nothing_is_made(
    api: httpx.AsyncClient, user: str
) -> None:
    refused = await api.post("/tokens", json={"role": "user", "user": user})
    assert refused.status_code == 422, refused.text
    assert "user" in refused.json()["detail"]
    assert (await api.get("/tokens")).json()["items"] == []
    project = _project("evil", {"members": ["alice", user]})
    applied = await api.post("/apply", json={"documents": [project]})
    assert applied.status_code == 422, applied.text
    assert "members" in applied.json()["detail"]
    assert (await api.get("/projects/evil")).status_code == 404


async def test_only_a_user_token_carries_a_user(api: httpx.AsyncClient) -> None:
    for role in ("admin", "worker"):
        body = {"role": role, "user": "alice", "worker": "w1" if role == "worker" else None}
        refused = await api.post("/tokens", json=body)
        assert refused.status_code == 422, refused.text
        assert "only user tokens take a user" in refused.json()["detail"]
    listed = await api.get("/tokens")
    assert listed.json()["items"] == []


async def test_a_worker_vouches_for_users_never_for_root(api: httpx.AsyncClient) -> None:
    made = await api.post("/tokens", json={"role": "worker", "worker": "w1"})
    worker = {"Authorization": f"Bearer {made.json()['token']}"}
    refused = await api.get("/whoami", headers={**worker, "X-Jobd-User": "root"})
    assert refused.status_code == 403
    assert "may not vouch for root" in refused.json()["detail"]
    hostile = await api.get("/whoami", headers={**worker, "X-Jobd-User": "../root"})
    assert hostile.status_code == 403
    vouched = await api.get("/whoami", headers={**worker, "X-Jobd-User": "alice"})
    assert vouched.status_code == 200, vouched.text
    assert (vouched.json()["user"], vouched.json()["via"]) == ("alice", "vouched")
    job = await _submit(api, {**worker, "X-Jobd-User": "alice"}, "shared", "v1")
    assert (await api.get(f"/jobs/{job}")).json()["metadata"]["owner"] == "alice"
    # Under a vouch the worker token is the user's, not the worker's: no worker route.
    beat = await api.post(
        "/workers/w1/heartbeat", json={}, headers={**worker, "X-Jobd-User": "alice"}
    )
    assert beat.status_code == 403


async def test_a_vouch_from_a_user_token_speaks_for_nobody(api: httpx.AsyncClient) -> None:
    bob = await _token(api, user="bob")
    who = await api.get("/whoami", headers={**bob, "X-Jobd-User": "alice"})
    assert who.json()["user"] == "bob"


async def test_the_dashboard_refuses_a_person_plainly(api: httpx.AsyncClient) -> None:
    alice = await _token(api, user="alice")
    refused = await api.post("/login-codes", headers=alice)
    assert refused.status_code == 403
    assert "dashboard signs in with a token of no user" in refused.json()["detail"]
