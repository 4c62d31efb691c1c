"""Secret env values, through the broker's real routes and real tokens, on real SQLite.

A job with `HF_TOKEN` (a default pattern) and `WANDB_API` (its project's pattern) reads
masked on every route a user, an admin or another worker reads it by; only its own
worker's reads (list and watch naming that worker, by a token that may speak as it) carry
the values. When the job ends the values leave the store — its row and the change feed's
earlier versions of it, read straight from the SQLite file — except when it was
Preempted, whose resume must run with them.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from jobd.api.secrets import MASK
from jobd.broker.state import BrokerConfig
from jobd.controllers import lifecycle
from jobd.controllers.projects import ProjectsController
from tests.integration.conftest import bind, broker_client, broker_state, job_document

pytestmark = pytest.mark.anyio

ADMIN = "an-admin-token-long-enough-for-anything-0123"
HF, WANDB = "hf_ReAlVaLuE0123456789", "wandb-real-value-987"
ENV = {"HF_TOKEN": HF, "WANDB_API": WANDB, "EPOCHS": "3"}
MASKED = {"HF_TOKEN": MASK, "WANDB_API": MASK, "EPOCHS": "3"}
PROJECT = {
    "apiVersion": "jobd/v1",
    "kind": "Project",
    "metadata": {"name": "nlp"},
    "spec": {"secret_env_keys": ["wandb_api"]},
}


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    config = BrokerConfig(data_dir=tmp_path / "data", log_dir=tmp_path / "logs", token=ADMIN)
    async with broker_client(config) as c:
        assert (await c.post("/apply", json={"documents": [PROJECT]})).status_code == 200
        yield c


async def _token(api: httpx.AsyncClient, **request: Any) -> dict[str, str]:
    made = await api.post("/tokens", json=request)
    assert made.status_code == 201, made.text
    return {"Authorization": f"Bearer {made.json()['token']}"}


def _train(name: str = "train", **env: str) -> dict[str, Any]:
    doc = job_document(name, env=env or dict(ENV))
    doc["metadata"]["project"] = "nlp"
    return doc


async def _submit(api: httpx.AsyncClient, name: str = "train") -> dict[str, Any]:
    made = await api.post("/jobs", json=_train(name))
    assert made.status_code == 201, made.text
    answer: dict[str, Any] = made.json()
    return answer


def _db(tmp_path: Path) -> sqlite3.Connection:
    return sqlite3.connect(tmp_path / "data" / "jobd.db")


def _stored(tmp_path: Path, job_id: int) -> tuple[str, list[str]]:
    """The job's row and every change of it the feed keeps, as the file holds them."""
    with _db(tmp_path) as db:
        (row,) = db.execute("SELECT body FROM jobs WHERE id = ?", (job_id,)).fetchone()
        changes = db.execute("SELECT body FROM changes WHERE key = ?", (str(job_id),))
        return row, [body for (body,) in changes]


def _holds_secrets(text: str) -> bool:
    return HF in text or WANDB in text


async def _watch(
    api: httpx.AsyncClient, headers: dict[str, str] | None = None, **query: Any
) -> str:
    watched = await api.get("/watch", params={"since": 0, "timeout": 0, **query}, headers=headers)
    assert watched.status_code == 200, watched.text
    return watched.text


async def test_every_read_but_the_workers_shows_the_secrets_masked(
    api: httpx.AsyncClient,
) -> None:
    created = await _submit(api)
    job_id = created["metadata"]["id"]
    assert created["spec"]["env"] == MASKED  # the create's answer
    assert created["status"]["effective"]["secret_env_keys"] == ["wandb_api"]
    alice = await _token(api, role="user", projects=["nlp"], name="alice")

    for headers in (None, alice):  # an admin and the job's own project's user alike
        one = await api.get(f"/jobs/{job_id}", headers=headers)
        assert one.json()["spec"]["env"] == MASKED
        listed = await api.get("/jobs", params={"project": "nlp"}, headers=headers)
        assert [j["spec"]["env"] for j in listed.json()["items"]] == [MASKED]
        assert not _holds_secrets(await _watch(api, headers, kind="Job"))
        applied = await api.post("/apply", json={"documents": [_train()]}, headers=headers)
        assert applied.json()["results"][0]["object"]["spec"]["env"] == MASKED
        dry = await api.post(
            "/apply", json={"documents": [_train("new")], "dry_run": True}, headers=headers
        )
        assert dry.json()["results"][0]["object"]["spec"]["env"] == MASKED
    events = await api.get("/events")
    assert not _holds_secrets(events.text)


async def test_only_the_bound_workers_reads_carry_the_values(api: httpx.AsyncClient) -> None:
    job_id = (await _submit(api))["metadata"]["id"]
    bind(api, job_id, "w1")
    w1 = await _token(api, role="worker", worker="w1", name="w1")
    w2 = await _token(api, role="worker", worker="w2", name="w2")
    alice = await _token(api, role="user", projects=["nlp"], name="alice")

    # The agent's two reads: its jobs listed, and their changes watched.
    listed = await api.get("/jobs", params={"worker": "w1"}, headers=w1)
    assert [j["spec"]["env"] for j in listed.json()["items"]] == [ENV]
    watched = json.loads(await _watch(api, w1, worker="w1"))
    assert [c["object"]["spec"]["env"] for c in watched["changes"]] == [ENV]
    # Its own job read any other way is masked, as for everyone.
    assert (await api.get(f"/jobs/{job_id}", headers=w1)).json()["spec"]["env"] == MASKED

    # Another worker cannot ask for w1's jobs, nor read the job.
    assert (await api.get("/jobs", params={"worker": "w1"}, headers=w2)).status_code == 403
    assert (await api.get(f"/jobs/{job_id}", headers=w2)).status_code == 403
    assert (await api.get("/watch", params={"worker": "w1"}, headers=w2)).status_code == 403
    assert (await api.get("/jobs", params={"worker": "w2"}, headers=w2)).json()["items"] == []
    # The job's own user, naming the worker, still reads it masked.
    as_user = await api.get("/jobs", params={"worker": "w1"}, headers=alice)
    assert [j["spec"]["env"] for j in as_user.json()["items"]] == [MASKED]
    assert not _holds_secrets(await _watch(api, alice, worker="w1"))
    # An admin token may speak as any worker (jobd dev's worker holds one).
    as_admin = await api.get("/jobs", params={"worker": "w1"})
    assert [j["spec"]["env"] for j in as_admin.json()["items"]] == [ENV]


async def _start(api: httpx.AsyncClient, job_id: int, worker: dict[str, str]) -> None:
    body = {"worker": "w1"}
    assert (await api.post(f"/jobs/{job_id}/started", json=body, headers=worker)).is_success


@pytest.mark.parametrize(("exit_code", "phase"), [(0, "Succeeded"), (3, "Failed")])
async def test_a_finished_job_keeps_no_secret_in_the_store(
    api: httpx.AsyncClient, tmp_path: Path, exit_code: int, phase: str
) -> None:
    job_id = (await _submit(api))["metadata"]["id"]
    bind(api, job_id, "w1")
    w1 = await _token(api, role="worker", worker="w1", name="w1")
    await _start(api, job_id, w1)
    row, changes = _stored(tmp_path, job_id)
    assert _holds_secrets(row) and all(_holds_secrets(c) for c in changes)

    body = {"worker": "w1", "exit_code": exit_code}
    ended = await api.post(f"/jobs/{job_id}/complete", json=body, headers=w1)
    assert ended.json()["status"]["phase"] == phase

    row, changes = _stored(tmp_path, job_id)
    assert json.loads(row)["spec"]["env"] == MASKED
    assert len(changes) == 4 and not any(_holds_secrets(c) for c in changes)
    conditions = {c["type"]: c for c in json.loads(row)["status"]["conditions"]}
    assert conditions["SecretsScrubbed"]["message"].endswith("HF_TOKEN, WANDB_API")
    # Even its worker now reads the mask: the values are gone.
    listed = await api.get("/jobs", params={"worker": "w1"}, headers=w1)
    assert [j["spec"]["env"] for j in listed.json()["items"]] == [MASKED]


async def test_a_cancelled_or_deleted_job_keeps_no_secret_either(
    api: httpx.AsyncClient, tmp_path: Path
) -> None:
    queued = (await _submit(api, "queued"))["metadata"]["id"]
    assert (await api.post(f"/jobs/{queued}/cancel")).json()["status"]["phase"] == "Cancelled"
    row, changes = _stored(tmp_path, queued)
    assert not _holds_secrets(row) and not any(_holds_secrets(c) for c in changes)

    preempted = await _preempted(api, tmp_path)
    revision = (await api.get("/jobs")).json()["revision"]
    assert (await api.delete(f"/jobs/{preempted}")).status_code == 200
    with _db(tmp_path) as db:
        changes = db.execute("SELECT body FROM changes WHERE key = ?", (str(preempted),))
        assert not any(_holds_secrets(body) for (body,) in changes)
    # Its worker's watch hears of the delete, from memory, masked too.
    deleted = json.loads(await _watch(api, worker="w1", since=revision))["changes"]
    assert [(c["op"], c["object"]["spec"]["env"]) for c in deleted] == [("DELETED", MASKED)]


async def _preempted(api: httpx.AsyncClient, tmp_path: Path) -> int:
    job_id = (await _submit(api, "long"))["metadata"]["id"]
    bind(api, job_id, "w1")
    w1 = await _token(api, role="worker", worker="w1", name=f"w1-{job_id}")
    started = {"worker": "w1", "checkpoint_dir": f"/ckpt/{job_id}/"}
    assert (await api.post(f"/jobs/{job_id}/started", json=started, headers=w1)).is_success
    assert (await api.post(f"/jobs/{job_id}/preempt")).is_success
    body = {"worker": "w1", "signal": 15}
    ended = await api.post(f"/jobs/{job_id}/complete", json=body, headers=w1)
    assert ended.json()["status"]["phase"] == "Preempted"
    return int(job_id)


async def test_a_preempted_job_keeps_its_secrets_and_its_resume_gets_them(
    api: httpx.AsyncClient, tmp_path: Path
) -> None:
    old = await _preempted(api, tmp_path)
    row, _changes = _stored(tmp_path, old)
    assert json.loads(row)["spec"]["env"] == ENV

    # It never completed a checkpoint: refused, with the reason, unless forced.
    refused = await api.post(f"/jobs/{old}/resume")
    assert refused.status_code == 409 and "never completed a checkpoint" in refused.text
    resumed = await api.post(f"/jobs/{old}/resume", params={"force": "true"})
    assert resumed.status_code == 201, resumed.text
    new = resumed.json()
    assert new["spec"]["env"] == MASKED | {"RESUME_FROM": f"/ckpt/{old}/"}
    bind(api, new["metadata"]["id"], "w1")
    listed = await api.get("/jobs", params={"worker": "w1", "phase": "Scheduled"})
    assert [j["spec"]["env"] for j in listed.json()["items"]] == [
        ENV | {"RESUME_FROM": f"/ckpt/{old}/"}
    ]


async def test_apply_compares_with_the_stored_values_and_never_stores_the_mask(
    api: httpx.AsyncClient, tmp_path: Path
) -> None:
    async def apply(doc: dict[str, Any]) -> httpx.Response:
        return await api.post("/apply", json={"documents": [doc]})

    assert (await apply(_train())).json()["results"][0]["action"] == "created"
    assert (await apply(_train())).json()["results"][0]["action"] == "unchanged"
    # What a masked read gives back (`job get -o yaml | job apply -f -`) changes nothing.
    read_back = (await api.get("/jobs", params={"name": "train"})).json()["items"][0]
    assert (await apply(read_back)).json()["results"][0]["action"] == "unchanged"
    # An edit beside a masked value keeps the stored value.
    edited = _train(**MASKED | {"EPOCHS": "4"})
    assert (await apply(edited)).json()["results"][0]["action"] == "configured"
    job_id = read_back["metadata"]["id"]
    row, _changes = _stored(tmp_path, job_id)
    assert json.loads(row)["spec"]["env"] == ENV | {"EPOCHS": "4"}
    # The mask is no value: a new job (or a new key) holding it is refused, naming it.
    refused = await apply(_train("fresh", **MASKED))
    assert refused.status_code == 422
    assert "spec.env.HF_TOKEN" in refused.json()["detail"]
    posted = await api.post("/jobs", json=_train("posted", HF_TOKEN=MASK))
    assert posted.status_code == 422 and "spec.env.HF_TOKEN" in posted.json()["detail"]
    new_key = _train(**ENV | {"EPOCHS": "4", "DB_PASSWORD": MASK})
    assert (await apply(new_key)).status_code == 422


async def test_a_finished_jobs_manifest_applied_again_is_unchanged(
    api: httpx.AsyncClient,
) -> None:
    assert (await api.post("/apply", json={"documents": [_train()]})).is_success
    job_id = (await api.get("/jobs")).json()["items"][0]["metadata"]["id"]
    assert (await api.post(f"/jobs/{job_id}/cancel")).is_success
    again = await api.post("/apply", json={"documents": [_train()]})
    assert again.json()["results"][0]["action"] == "unchanged"


@pytest.mark.parametrize(
    ("pattern", "reason"),
    [("", "is empty"), ("A\u0000B", "control character"), ("K" * 300, "over 256")],
)
async def test_a_bad_pattern_is_a_422_naming_the_field(
    api: httpx.AsyncClient, pattern: str, reason: str
) -> None:
    project = {**PROJECT, "spec": {"secret_env_keys": ["OK_*", pattern]}}
    refused = await api.post("/apply", json={"documents": [project]})
    assert refused.status_code == 422
    detail = refused.json()["detail"]
    assert "spec.secret_env_keys" in detail and reason in detail


async def test_a_project_pattern_added_later_masks_its_live_jobs(api: httpx.AsyncClient) -> None:
    made = await api.post("/jobs", json=_train("late", MLFLOW_CRED="m-real", EPOCHS="3"))
    assert made.json()["spec"]["env"] == {"MLFLOW_CRED": "m-real", "EPOCHS": "3"}
    project = {**PROJECT, "spec": {"secret_env_keys": ["wandb_api", "MLFLOW_*"]}}
    assert (await api.post("/apply", json={"documents": [project]})).is_success
    # The projects loop re-resolves live jobs' effective settings; no loop runs here.
    await ProjectsController(broker_state(api).ctx).reconcile("nlp")
    job = await api.get(f"/jobs/{made.json()['metadata']['id']}")
    assert job.json()["spec"]["env"] == {"MLFLOW_CRED": MASK, "EPOCHS": "3"}


async def test_auto_resume_carries_the_secrets_into_the_new_run(
    api: httpx.AsyncClient, tmp_path: Path
) -> None:
    doc = _train("auto")
    doc["spec"]["auto_resume"] = True
    job_id = (await api.post("/jobs", json=doc)).json()["metadata"]["id"]
    bind(api, job_id, "w1")
    w1 = await _token(api, role="worker", worker="w1", name="w1")
    started = {"worker": "w1", "checkpoint_dir": f"/ckpt/{job_id}/"}
    assert (await api.post(f"/jobs/{job_id}/started", json=started, headers=w1)).is_success
    assert (await api.post(f"/jobs/{job_id}/preempt")).is_success
    report = {"worker": "w1"}
    done = await api.post(f"/jobs/{job_id}/checkpoint-complete", json=report, headers=w1)
    assert done.is_success, done.text
    ended = await api.post(f"/jobs/{job_id}/complete", json=report | {"signal": 15}, headers=w1)
    assert ended.json()["status"]["phase"] == "Preempted"

    await lifecycle.LifecycleController(broker_state(api).ctx).reconcile(str(job_id))
    resumed = (await api.get("/jobs", params={"name": "auto-r1"})).json()["items"]
    assert len(resumed) == 1
    row, _changes = _stored(tmp_path, resumed[0]["metadata"]["id"])
    assert json.loads(row)["spec"]["env"] == ENV | {"RESUME_FROM": f"/ckpt/{job_id}/"}
