"""Tokens with roles, driven in-process on real SQLite: what each role may call and touch.

The tokens are real ones, made through the admin API; the broker's middleware, fast path
and routes are the ones `jobd broker` serves. A user token of project a walks every
route about a job of project b (403 naming b) and of its own (allowed); a worker token
tries every verb it must not have; a revoked token is refused on the next request.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from structlog.testing import capture_logs

from jobd.api.models import Phase, WorkerSpec
from jobd.broker.auth.access import ROLES
from jobd.broker.state import BrokerConfig
from jobd.controllers.verbs.worker_lease import register_worker
from jobd.wire import routes
from tests.integration.conftest import bind, broker_client, broker_state, job_document

pytestmark = pytest.mark.anyio

ADMIN = "an-admin-token-long-enough-for-anything-0123"


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    config = BrokerConfig(data_dir=tmp_path / "data", log_dir=tmp_path / "logs", token=ADMIN)
    async with broker_client(config) as c:
        yield c


async def _token(api: httpx.AsyncClient, **request: Any) -> dict[str, str]:
    made = await api.post("/tokens", json=request)
    assert made.status_code == 201, made.text
    return {"Authorization": f"Bearer {made.json()['token']}"}


async def _job(api: httpx.AsyncClient, name: str, project: str) -> int:
    doc = job_document(name)
    doc["metadata"]["project"] = project
    made = await api.post("/jobs", json=doc)
    assert made.status_code == 201, made.text
    return int(made.json()["metadata"]["id"])


def _job_routes(job_id: int) -> list[tuple[str, str, dict[str, Any]]]:
    """Every route that reads or acts on one job, as a user would call it."""
    return [
        ("GET", f"/jobs/{job_id}", {}),
        ("GET", f"/jobs/{job_id}/explain", {}),
        ("DELETE", f"/jobs/{job_id}", {}),
        ("POST", f"/jobs/{job_id}/cancel", {}),
        ("POST", f"/jobs/{job_id}/preempt", {}),
        ("POST", f"/jobs/{job_id}/preempt-blockers", {"params": {"dry_run": "true"}}),
        ("POST", f"/jobs/{job_id}/resume", {}),
        ("GET", f"/jobs/{job_id}/logs", {}),
        ("GET", "/events", {"params": {"job": job_id}}),
    ]


def test_every_authenticated_route_says_who_may_call_it() -> None:
    assert {r for r in routes.ROUTES if not r.public} == set(ROLES)


async def test_a_user_token_gets_403_naming_the_project_on_every_route_of_another(
    api: httpx.AsyncClient,
) -> None:
    alice = await _token(api, role="user", projects=["a"], name="alice")
    theirs = await _job(api, "theirs", "b")
    for method, url, kw in _job_routes(theirs):
        refused = await api.request(method, url, headers=alice, **kw)
        assert refused.status_code == 403, (method, url, refused.text)
        assert "'b'" in refused.json()["detail"], (method, url)
    doc = job_document("sneaky")
    doc["metadata"]["project"] = "b"
    for method, url, kw in [
        ("POST", "/jobs", {"json": doc}),
        ("POST", "/apply", {"json": {"documents": [doc]}}),
        ("GET", "/jobs", {"params": {"project": "b"}}),
        ("GET", "/projects/b", {}),
    ]:
        refused = await api.request(method, url, headers=alice, **kw)
        assert refused.status_code == 403 and "'b'" in refused.json()["detail"], url
    assert (await api.get(f"/jobs/{theirs}")).json()["status"]["phase"] == "Pending"


async def test_a_user_token_acts_on_its_own_projects_jobs(api: httpx.AsyncClient) -> None:
    alice = await _token(api, role="user", projects=["a"], name="alice")
    doc = job_document("mine")
    doc["metadata"]["project"] = "a"
    mine = (await api.post("/jobs", json=doc, headers=alice)).json()["metadata"]["id"]
    applied = await api.post("/apply", json={"documents": [doc]}, headers=alice)
    assert applied.status_code == 200
    for method, url, kw in _job_routes(mine):
        answered = await api.request(method, url, headers=alice, **kw)
        assert answered.status_code != 403, (method, url, answered.text)
    assert (await api.get(f"/jobs/{mine}", headers=alice)).json()["status"]["phase"] in (
        "Cancelled",
        "Cancelling",
    )


async def test_a_user_token_lists_and_watches_only_its_projects(api: httpx.AsyncClient) -> None:
    alice = await _token(api, role="user", projects=["a", "c"], name="alice")
    start = (await api.get("/jobs")).json()["revision"]
    ours = [await _job(api, "one", "a"), await _job(api, "two", "c")]
    theirs = await _job(api, "three", "b")
    listed = (await api.get("/jobs", headers=alice)).json()["items"]
    assert [j["metadata"]["id"] for j in listed] == ours
    watched = await api.get("/watch", params={"since": start, "timeout": 0}, headers=alice)
    assert [c["object"]["metadata"]["id"] for c in watched.json()["changes"]] == ours
    events = (await api.get("/events", headers=alice)).json()["items"]
    assert events and {e["job"] for e in events} == set(ours)
    assert theirs in {e["job"] for e in (await api.get("/events")).json()["items"]}
    await api.post("/apply", json={"documents": [_project("a"), _project("b")]})
    projects = (await api.get("/projects", headers=alice)).json()["items"]
    assert [p["metadata"]["name"] for p in projects] == ["a"]
    refused = await api.post("/apply", json={"documents": [_project("a")]}, headers=alice)
    assert refused.status_code == 403 and "project" in refused.json()["detail"]


def _project(name: str) -> dict[str, Any]:
    return {"apiVersion": "jobd/v1", "kind": "Project", "metadata": {"name": name}}


async def test_a_worker_token_cannot_create_cancel_change_cordon_or_speak_for_another(
    api: httpx.AsyncClient,
) -> None:
    w1 = await _token(api, role="worker", worker="w1")
    ours, theirs = await _job(api, "ours", "a"), await _job(api, "theirs", "a")
    bind(api, ours, "w1")
    bind(api, theirs, "w2")
    registration = {"spec": {"slots": 1}}
    refused = [
        ("POST", "/jobs", {"json": job_document("x")}),
        ("POST", "/apply", {"json": {"documents": [job_document("x")]}}),
        ("POST", f"/jobs/{ours}/cancel", {}),
        ("POST", f"/jobs/{ours}/preempt", {}),
        ("DELETE", f"/jobs/{ours}", {}),
        ("POST", f"/jobs/{ours}/resume", {}),
        ("POST", "/workers/w1/cordon", {}),
        ("POST", "/workers/w2/drain", {}),
        ("PUT", "/workers/w2", {"json": registration}),
        ("POST", "/workers/w2/heartbeat", {"json": {}}),
        ("POST", "/workers/w2/reports", {"json": {"reports": []}}),
        ("POST", f"/jobs/{theirs}/started", {"json": {"worker": "w2"}}),
        ("POST", f"/jobs/{theirs}/logs", {"content": b"forged"}),
        ("GET", f"/jobs/{theirs}", {}),
        ("GET", "/jobs", {"params": {"worker": "w2"}}),
        ("GET", "/watch", {"params": {"worker": "w2", "timeout": 0}}),
        ("POST", "/tokens", {"json": {"role": "admin"}}),
        ("GET", "/tokens", {}),
    ]
    for method, url, kw in refused:
        answer = await api.request(method, url, headers=w1, **kw)
        assert answer.status_code == 403, (method, url, answer.text)
    # Speaking as itself about another worker's job: fencing refuses it, nothing changes.
    forged = {"reports": [{"job": theirs, "verb": "complete", "exit_code": 0}]}
    batch = (await api.post("/workers/w1/reports", json=forged, headers=w1)).json()
    assert batch["results"][0]["status"] == 409
    single = await api.post(f"/jobs/{theirs}/complete", json={"worker": "w1"}, headers=w1)
    assert single.status_code == 409
    assert (await api.get(f"/jobs/{theirs}")).json()["status"]["phase"] == "Scheduled"
    # What it needs, as itself.
    assert (await api.put("/workers/w1", json=registration, headers=w1)).status_code == 200
    assert (await api.post("/workers/w1/heartbeat", json={}, headers=w1)).status_code == 200
    mine = (await api.get("/jobs", params={"worker": "w1"}, headers=w1)).json()["items"]
    assert [j["metadata"]["id"] for j in mine] == [ours]
    assert (await api.get(f"/jobs/{ours}", headers=w1)).status_code == 200
    started = await api.post(f"/jobs/{ours}/started", json={"worker": "w1"}, headers=w1)
    assert started.status_code == 200
    logs = await api.post(f"/jobs/{ours}/logs", params={"offset": 0}, content=b"x", headers=w1)
    assert logs.status_code == 200


@pytest.mark.forged_events  # made-up events and fields, as a worker may post
async def test_a_worker_tokens_events_about_other_workers_jobs_are_dropped(
    api: httpx.AsyncClient,
) -> None:
    w1 = await _token(api, role="worker", worker="w1")
    ours, theirs = await _job(api, "ours", "a"), await _job(api, "theirs", "a")
    bind(api, ours, "w1")
    bind(api, theirs, "w2")
    events = [
        {"event": "forged_checkpoint", "job": theirs},
        {"event": "seen", "job": ours},
        {"event": "host_note"},
    ]
    as_w2 = await api.post("/events", json={"worker": "w2", "events": events}, headers=w1)
    assert as_w2.status_code == 403
    body = {"worker": "w1", "events": events}
    assert (await api.post("/events", json=body, headers=w1)).json() == {"accepted": 2}
    batch = {"reports": [], "events": events}
    answer = await api.post("/workers/w1/reports", json=batch, headers=w1)
    assert answer.json()["events"] == 2
    record = (await api.get("/events", params={"type": "forged_checkpoint"})).json()["items"]
    assert record == []


async def test_a_revoked_token_is_refused_on_the_next_request(api: httpx.AsyncClient) -> None:
    bob = await _token(api, role="user", projects=["a"], name="bob")
    assert (await api.get("/jobs", headers=bob)).status_code == 200
    assert (await api.delete("/tokens/bob")).json() == {"revoked": "bob"}
    assert (await api.get("/jobs", headers=bob)).status_code == 401
    assert (await api.delete("/tokens/bob")).status_code == 404


async def test_the_token_is_in_no_listing_log_line_or_store_row(
    api: httpx.AsyncClient, tmp_path: Path
) -> None:
    with capture_logs() as logs:
        made = (await api.post("/tokens", json={"role": "worker", "worker": "w1"})).json()
    token = made["token"]
    assert token.startswith("jobd_") and len(token) >= 40
    listed = await api.get("/tokens")
    assert token not in listed.text and made["label"] in listed.text
    await api.get("/jobs", headers={"Authorization": f"Bearer {token}"})
    assert token not in repr(logs)
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert token.encode() not in path.read_bytes(), path
    listed_again = (await api.get("/tokens")).json()["items"]
    assert listed_again[0]["last_used_at"] is not None  # written on listing, not per request


@pytest.mark.parametrize(
    "headers",
    [
        {"Authorization": f"Basic {ADMIN}"},
        {"Authorization": f"bearer {ADMIN}"},
        {"Authorization": f"Bearer  {ADMIN}"},
        {"Authorization": f"Bearer {ADMIN[:-1]}"},
        {"Authorization": f"Bearer {ADMIN}x"},
        {"Authorization": f"Bearer {ADMIN} "},
        {"Authorization": "Bearer "},
        {"X-Authorization": f"Bearer {ADMIN}"},
        {},
    ],
)
async def test_no_spelling_of_a_token_but_the_exact_one_gets_in(
    api: httpx.AsyncClient, headers: dict[str, str]
) -> None:
    api.headers.pop("Authorization")
    assert (await api.get("/jobs", headers=headers)).status_code == 401
    assert (await api.post("/jobs", json=job_document("x"), headers=headers)).status_code == 401


@pytest.mark.parametrize(
    "path",
    ["/jobs?token=" + ADMIN, "/jobs?access_token=" + ADMIN, "/healthz/../jobs", "//jobs"],
)
async def test_query_strings_and_path_tricks_get_401(api: httpx.AsyncClient, path: str) -> None:
    api.headers.pop("Authorization")
    scope_path, _, query = path.partition("?")
    answered: list[int] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            answered.append(message["status"])

    app = api._transport.app  # type: ignore[attr-defined]
    scope = {
        "type": "http",
        "method": "GET",
        "path": scope_path,
        "raw_path": scope_path.encode(),
        "query_string": query.encode(),
        "headers": [],
        "http_version": "1.1",
        "scheme": "http",
        "server": ("jobd", 80),
        "root_path": "",
        "app": app,
    }
    await app(scope, receive, send)
    assert answered == [401]


async def test_explain_names_no_victim_of_a_project_its_reader_may_not_read(
    api: httpx.AsyncClient,
) -> None:
    alice = await _token(api, role="user", projects=["a"], name="alice")
    state = broker_state(api)
    register_worker(state.ctx, "w1", WorkerSpec(slots=1), "host", "procgroup")
    theirs = await _job(api, "theirs", "b")
    running = state.store.get_job(theirs).evolve()  # as the worker would have it run
    running.status.phase, running.status.worker = Phase.RUNNING, "w1"
    running.status.started_at = state.ctx.clock.now()
    running.status.effective.preemptible = True
    state.store.update_job(running)
    doc = job_document("mine", priority=50)
    doc["metadata"]["project"] = "a"
    mine = (await api.post("/jobs", json=doc, headers=alice)).json()["metadata"]["id"]
    seen = (await api.get(f"/jobs/{mine}/explain", headers=alice)).json()
    assert seen["reason"] == "WaitingForCapacity"
    assert seen["workers"][0]["says"] == ["short of slots by 1 (needs 1, 0 free of 1)"]
    victims = seen["preemption"]["victims"]
    assert victims == [{"job": theirs, "name": None, "priority": 0}], "b is not alice's"
    admin_sees = (await api.get(f"/jobs/{mine}/explain")).json()["preemption"]["victims"]
    assert admin_sees[0]["name"] == "b/theirs"
    worker = await _token(api, role="worker", worker="w1")
    assert (await api.get(f"/jobs/{mine}/explain", headers=worker)).status_code == 403
