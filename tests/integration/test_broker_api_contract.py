"""The broker's HTTP contract, driven in-process through httpx.ASGITransport.

No controllers run here (the ASGI lifespan is not started), so every assertion is about
what the API itself answers: auth, validation, conflicts, apply, watch, logs, metrics.
"""

from __future__ import annotations

import gc

import httpx
import pytest

from tests.integration.conftest import bind, job_document

pytestmark = pytest.mark.anyio


async def test_requests_without_the_token_get_401_except_health_and_metrics(
    api: httpx.AsyncClient,
) -> None:
    anonymous = {"Authorization": "Bearer wrong"}
    assert (await api.get("/jobs", headers=anonymous)).status_code == 401
    api.headers.pop("Authorization")
    assert (await api.get("/jobs")).status_code == 401
    assert (await api.get("/healthz")).status_code == 200
    assert (await api.get("/readyz")).text == "leader\n"
    metrics = (await api.get("/metrics")).text
    assert 'jobd_jobs{phase="Pending"} 0' in metrics
    assert "jobd_queue_oldest_age_seconds" in metrics


async def test_openapi_document_lists_the_seed_paths(api: httpx.AsyncClient) -> None:
    assert (
        await api.get("/openapi.json", headers={"Authorization": "Bearer no"})
    ).status_code == 401
    paths = (await api.get("/openapi.json")).json()["paths"]
    for path in ("/jobs/{job_id}/complete", "/jobs/{job_id}/checkpoint-complete", "/apply"):
        assert path in paths


async def test_invalid_body_gets_422_naming_the_field(api: httpx.AsyncClient) -> None:
    resp = await api.post("/jobs", json=job_document("neg", priority=-1))
    assert resp.status_code == 422
    assert resp.json()["detail"].startswith("spec.priority:")
    resp = await api.post("/jobs", json=job_document("typo", comand=["x"]))
    assert resp.status_code == 422 and "spec.comand: unknown field" in resp.json()["detail"]
    resp = await api.post("/jobs", json=job_document("grace", checkpoint_grace_s=301))
    assert resp.status_code == 422 and "300 s cap" in resp.json()["detail"]
    assert (await api.get("/jobs")).json()["items"] == []


async def test_apply_decides_created_configured_unchanged(api: httpx.AsyncClient) -> None:
    docs = [job_document("a"), job_document("b", depends_on=["a"])]
    first = (await api.post("/apply", json={"documents": docs})).json()["results"]
    assert [r["action"] for r in first] == ["created", "created"]
    assert first[1]["object"]["status"]["parents"] == [first[0]["object"]["metadata"]["id"]]
    again = (await api.post("/apply", json={"documents": docs})).json()["results"]
    assert [r["action"] for r in again] == ["unchanged", "unchanged"]
    changed = [job_document("a", priority=7), job_document("b", depends_on=["a"])]
    dry = (await api.post("/apply", json={"documents": changed, "dry_run": True})).json()
    assert [r["action"] for r in dry["results"]] == ["configured", "unchanged"]
    live = (await api.get("/jobs", params={"name": "a"})).json()["items"][0]
    assert live["spec"].get("priority") is None  # the dry run wrote nothing
    new_parents = [job_document("b", depends_on=[])]
    resp = await api.post("/apply", json={"documents": new_parents})
    # 409, as for any change the live job refuses: the same document creates a new job.
    assert resp.status_code == 409 and "cannot change the parents" in resp.json()["detail"]


async def test_a_refused_apply_leaves_every_job_untouched(api: httpx.AsyncClient) -> None:
    await api.post("/apply", json={"documents": [job_document("keep")]})
    before = (await api.get("/jobs")).json()["items"]
    bad = [job_document("new-one"), job_document("orphan", depends_on=["missing"])]
    resp = await api.post("/apply", json={"documents": bad})
    # 404: the parent was not found (what the schema allows, the store decides).
    assert resp.status_code == 404 and "missing" in resp.json()["detail"]
    assert (await api.get("/jobs")).json()["items"] == before


async def test_the_collector_runs_again_after_an_apply_that_landed_or_was_refused(
    api: httpx.AsyncClient,
) -> None:
    """An apply pauses cyclic garbage collection while it runs, never longer."""
    assert gc.isenabled()
    landed = await api.post("/apply", json={"documents": [job_document("gc-a")]})
    assert landed.status_code == 200 and gc.isenabled()
    refused = await api.post("/apply", json={"documents": [job_document("x", depends_on=["no"])]})
    assert refused.status_code == 404 and gc.isenabled()


async def test_verbs_that_do_not_apply_get_409_and_change_nothing(api: httpx.AsyncClient) -> None:
    created = (await api.post("/jobs", json=job_document("p"))).json()
    job_id = created["metadata"]["id"]
    resp = await api.post(f"/jobs/{job_id}/preempt")
    assert resp.status_code == 409 and "only a Running job" in resp.json()["detail"]
    assert (await api.delete(f"/jobs/{job_id}")).status_code == 409
    assert (await api.get(f"/jobs/{job_id}")).json() == created
    cancelled = (await api.post(f"/jobs/{job_id}/cancel")).json()
    assert cancelled["status"]["phase"] == "Cancelled"
    assert (await api.post(f"/jobs/{job_id}/cancel")).status_code == 409
    assert (await api.delete(f"/jobs/{job_id}")).json() == {"deleted": job_id}
    assert (await api.get(f"/jobs/{job_id}")).status_code == 404


async def test_a_stale_resource_version_on_apply_gets_409(api: httpx.AsyncClient) -> None:
    created = (await api.post("/jobs", json=job_document("cas"))).json()
    stale = job_document("cas", priority=3)
    stale["metadata"]["resource_version"] = created["metadata"]["resource_version"] - 1
    resp = await api.post("/apply", json={"documents": [stale]})
    assert resp.status_code == 409


async def test_watch_returns_changes_after_a_revision(api: httpx.AsyncClient) -> None:
    start = (await api.get("/jobs")).json()["revision"]
    await api.post("/jobs", json=job_document("w1"))
    body = (await api.get("/watch", params={"since": start, "timeout": 1})).json()
    assert [c["op"] for c in body["changes"]] == ["ADDED"]
    assert body["changes"][0]["object"]["metadata"]["name"] == "w1"
    quiet = (await api.get("/watch", params={"since": body["revision"], "timeout": 0.05})).json()
    assert quiet["changes"] == []


async def test_logs_are_appended_at_offsets_and_read_back(api: httpx.AsyncClient) -> None:
    job_id = (await api.post("/jobs", json=job_document("l"))).json()["metadata"]["id"]
    bind(api, job_id, "w1")  # a Pending job takes no output (see test_job_output_is_capped...)
    await api.post(f"/jobs/{job_id}/logs", params={"offset": 0}, content=b"hello ")
    await api.post(f"/jobs/{job_id}/logs", params={"offset": 0}, content=b"hello ")  # a retry
    await api.post(f"/jobs/{job_id}/logs", params={"offset": 6}, content=b"world\n")
    resp = await api.get(f"/jobs/{job_id}/logs", params={"offset": 0})
    assert resp.content == b"hello world\n"
    assert resp.headers["X-Jobd-Offset"] == "12" and resp.headers["X-Jobd-Done"] == "false"
    tail = await api.get(f"/jobs/{job_id}/logs", params={"offset": 6})
    assert tail.content == b"world\n"


@pytest.mark.forged_events  # made-up events and fields, as a worker may post
async def test_worker_events_are_ingested_tagged_with_the_worker(api: httpx.AsyncClient) -> None:
    body = {
        "worker": "gpu-1",
        "events": [{"event": "process_started", "job": 5, "fields": {"pid": 9}}],
    }
    assert (await api.post("/events", json=body)).json() == {"accepted": 1}
    items = (await api.get("/events", params={"type": "process_started"})).json()["items"]
    assert items[0]["worker"] == "gpu-1" and items[0]["pid"] == 9 and items[0]["job"] == 5


async def test_apply_without_objects_answers_kind_name_action_only(api: httpx.AsyncClient) -> None:
    resp = await api.post(
        "/apply", params={"objects": "false"}, json={"documents": [job_document("s")]}
    )
    assert resp.json() == {"results": [{"kind": "Job", "name": "default/s", "action": "created"}]}


async def test_apply_names_the_document_and_field_whichever_path_parses_it(
    api: httpx.AsyncClient,
) -> None:
    """Jobs that all say `kind: Job` take a one-pass parse; the rest, one at a time."""
    no_kind = job_document("nk")
    del no_kind["kind"]
    project = {"apiVersion": "jobd/v1", "kind": "Project", "metadata": {"name": "pj"}}
    cases = [
        (
            [job_document("ok"), job_document("typo", comand=["x"])],
            "2:1: spec.comand: unknown field",
        ),
        ([job_document("ok"), no_kind], "document 2:1: kind: expected one of"),
        ([job_document("ok"), {"kind": "Worker", "metadata": {"name": "w"}}], "written by workers"),
        ([job_document("g", checkpoint_grace_s=301)], "300 s cap"),
    ]
    for docs, detail in cases:
        resp = await api.post("/apply", json={"documents": docs})
        assert resp.status_code == 422 and detail in resp.json()["detail"], resp.text
    assert (await api.get("/jobs")).json()["items"] == []
    mixed = [project, {**job_document("in-pj"), "metadata": {"name": "in-pj", "project": "pj"}}]
    results = (await api.post("/apply", json={"documents": mixed})).json()["results"]
    assert [(r["kind"], r["action"]) for r in results] == [
        ("Project", "created"),
        ("Job", "created"),
    ]
    dry = await api.post("/apply", json={"documents": [job_document("d")], "dry_run": True})
    assert dry.json()["results"][0]["action"] == "created"
    assert (await api.get("/jobs", params={"name": "d"})).json()["items"] == []


async def test_a_report_batch_answers_each_report_on_its_own(api: httpx.AsyncClient) -> None:
    ours = (await api.post("/jobs", json=job_document("ours"))).json()["metadata"]["id"]
    theirs = (await api.post("/jobs", json=job_document("theirs"))).json()["metadata"]["id"]
    bind(api, ours, "w1")
    bind(api, theirs, "w2")
    batch = {
        "reports": [
            {"job": ours, "verb": "started", "checkpoint_dir": "/ckpt/ours/"},
            {"job": theirs, "verb": "started"},  # bound to another worker: refused
            {"job": 999_999, "verb": "complete", "exit_code": 0},  # no such job
            {"job": ours, "verb": "complete", "exit_code": 0},
        ],
        "events": [{"event": "process_exited", "job": ours, "fields": {"exit_code": 0}}],
    }
    body = (await api.post("/workers/w1/reports", json=batch)).json()
    assert [r["status"] for r in body["results"]] == [200, 409, 404, 200]
    assert "not 'w1'" in body["results"][1]["detail"]
    assert body["results"][3]["phase"] == "Succeeded" and body["events"] == 1
    done = (await api.get(f"/jobs/{ours}")).json()["status"]
    assert done["phase"] == "Succeeded" and done["checkpoint_dir"] == "/ckpt/ours/"
    assert (await api.get(f"/jobs/{theirs}")).json()["status"]["phase"] == "Scheduled"
    events = (await api.get("/events", params={"type": "process_exited"})).json()["items"]
    assert events[0]["worker"] == "w1" and events[0]["job"] == ours


async def test_a_report_batch_with_an_unknown_verb_is_refused_whole(
    api: httpx.AsyncClient,
) -> None:
    resp = await api.post("/workers/w1/reports", json={"reports": [{"job": 1, "verb": "exploded"}]})
    assert resp.status_code == 422 and "verb" in resp.json()["detail"]


async def test_create_answers_like_every_route_on_its_fast_path(api: httpx.AsyncClient) -> None:
    created = await api.post("/jobs", json=job_document("fast"))
    assert created.status_code == 201 and created.json()["metadata"]["name"] == "fast"
    again = await api.post("/jobs", json=job_document("fast"))
    assert again.status_code == 409 and "already exists" in again.json()["detail"]
    bad = await api.post("/jobs", json={**job_document("typo"), "spce": {}})
    assert bad.status_code == 422 and bad.json() == {"detail": "spce: unknown field"}
    huge = await api.post("/jobs", content=b"{" + b" " * (2 * 1024 * 1024) + b"}")
    assert huge.status_code == 413
    anonymous = await api.post("/jobs", json=job_document("x"), headers={"Authorization": ""})
    assert anonymous.status_code == 401
    assert [j["metadata"]["name"] for j in (await api.get("/jobs")).json()["items"]] == ["fast"]


async def test_watch_parameters_are_checked_like_every_route(api: httpx.AsyncClient) -> None:
    negative = await api.get("/watch", params={"since": -1})
    assert negative.status_code == 422
    assert negative.json()["detail"] == "since: Input should be greater than or equal to 0"
    word = await api.get("/watch", params={"timeout": "soon"})
    assert word.status_code == 422 and word.json()["detail"].startswith("timeout: ")
    schema = (await api.get("/openapi.json")).json()["paths"]["/watch"]["get"]
    assert {p["name"] for p in schema["parameters"]} == {
        *("since", "kind", "worker", "timeout"),
        *("project", "name", "phase", "selector"),  # a listing's filters (the informer's)
        "skip_own_reports",  # the agent's: not its own reports of a Running job
    }


@pytest.mark.anyio
async def test_a_project_counts_its_generations_whatever_a_client_sent(
    api: httpx.AsyncClient,
) -> None:
    """Found by schemathesis: a generation of 2^53 - 1 sent at creation was carried on, one
    change later past what a reader accepts, and every read of projects answered 500."""
    doc = {
        "apiVersion": "jobd/v1",
        "kind": "Project",
        "metadata": {"name": "gen", "generation": 2**53 - 1},
        "spec": {"priority": 1},
    }
    assert (await api.post("/apply", json={"documents": [doc]})).status_code == 200
    doc["spec"] = {"priority": 2}
    assert (await api.post("/apply", json={"documents": [doc]})).status_code == 200
    resp = await api.get("/projects/gen")
    assert resp.status_code == 200, resp.text
    assert resp.json()["metadata"]["generation"] == 2  # created, then changed once
    assert (await api.get("/projects")).status_code == 200
