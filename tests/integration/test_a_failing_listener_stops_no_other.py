"""A store listener that fails after a commit stops no other, fails no request, and its
cache is resynced from the store: the broker's wiring (broker/wiring.py).

Real SQLite and the real app through httpx.ASGITransport; the loops are not started, so
the manager's queues show what the commits queued.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from structlog.testing import capture_logs

from jobd.api.models import WorkerSpec
from jobd.broker.state import BrokerConfig, BrokerState
from jobd.broker.streams.feed import FeedEntry
from jobd.broker.wiring import Listener
from jobd.controllers.queueing import WorkQueue
from jobd.controllers.verbs.worker_lease import register_worker
from jobd.controllers.view import ClusterView
from tests.integration.conftest import TOKEN, bind, broker_state, job_document

pytestmark = pytest.mark.anyio


@pytest.fixture
def logs() -> Iterator[list[dict[str, Any]]]:
    with capture_logs() as captured:
        yield captured


def _failures(captured: list[dict[str, Any]], event: str = "listener_failed") -> list[str]:
    return [entry["listener"] for entry in captured if entry["event"] == event]


def _assert_matches_the_store(state: BrokerState) -> None:
    """The view, the feed and the manager's queues hold what the store holds."""
    fresh = ClusterView(state.store)
    assert state.ctx.view.versions() == fresh.versions()
    for name in fresh.workers:
        assert state.ctx.view.bound_to(name) == fresh.bound_to(name)
    assert state.feed.revision == state.store.revision()
    from_feed = state.feed.since(0, lambda _entry: True)
    from_table = [FeedEntry.of(change) for change in state.store.changes_since(0)]
    assert from_feed == from_table
    changes = state.store.changes_since(0)
    for name, controller in state.manager.controllers.items():
        wanted = {key for change in changes for key in controller.keys_for(change)}
        assert wanted <= _queued(state.manager.queues[name]), name


def _queued(queue: WorkQueue) -> set[str]:
    """Keys waiting in a queue whose loop does not run: now, or after a delay."""
    return queue._dirty | queue._due.keys()


def _events_file(state: BrokerState) -> list[dict[str, Any]]:
    return [json.loads(line) for line in state.events.path.read_text().splitlines()]


async def _register(api: httpx.AsyncClient, name: str) -> None:
    body = {"spec": WorkerSpec(slots=2).model_dump(mode="json"), "hostname": name, "runner": "x"}
    assert (await api.put(f"/workers/{name}", json=body)).status_code == 200


async def test_a_closed_events_file_fails_no_request_and_is_caught_up_from_the_table(
    api: httpx.AsyncClient, logs: list[dict[str, Any]]
) -> None:
    state = broker_state(api)
    await api.post("/jobs", json=job_document("before"))
    state.events._file.close()  # as a full disk would make every write fail

    created = await api.post("/jobs", json=job_document("after"))
    await _register(api, "gpu-1")

    assert created.status_code == 201  # committed, so answered as committed
    assert _failures(logs) == ["events_file"]
    assert state.wiring.failures == {"events_file": 1}
    assert logs[0]["log_level"] == "error" and logs[0]["exc_info"] is True
    assert "gpu-1" in state.ctx.view.workers  # the later commit reached every listener
    _assert_matches_the_store(state)
    table = [json.loads(event.line()) for event in state.store.list_events()]
    assert _events_file(state) == table  # in order, none twice, none lost


async def test_a_view_that_missed_a_commit_is_reloaded_at_once(
    api: httpx.AsyncClient, logs: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    state = broker_state(api)
    # Created before any worker: left queued (a create binds into room it finds).
    job_id = (await api.post("/jobs", json=job_document("a"))).json()["metadata"]["id"]
    await _register(api, "gpu-1")

    def broken(_view: ClusterView, _change: object) -> None:
        raise RuntimeError("a bug in the view")

    with monkeypatch.context() as patched:
        patched.setattr(ClusterView, "_on_job", broken)
        bind(api, job_id, "gpu-1")

    assert _failures(logs) == ["view"]
    assert [e["listener"] for e in logs if e["event"] == "listener_resynced"] == ["view"]
    assert [j.id for j in state.ctx.view.bound_to("gpu-1")] == [job_id]
    assert state.wiring.failures == {"view": 1} and not state.wiring.stale
    _assert_matches_the_store(state)
    assert [e.get("job") for e in _events_file(state)] == [job_id, None]  # the writer went on


async def test_a_feed_that_missed_a_commit_answers_watches_from_the_store(
    api: httpx.AsyncClient, logs: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    state = broker_state(api)
    start = (await api.get("/jobs")).json()["revision"]
    await api.post("/jobs", json=job_document("seen"))

    def broken(_change: object) -> FeedEntry:
        raise RuntimeError("a bug in the feed")

    with monkeypatch.context() as patched:
        patched.setattr(FeedEntry, "of", broken)
        missed = (await api.post("/jobs", json=job_document("missed"))).json()
    await api.post("/jobs", json=job_document("after"))

    assert _failures(logs) == ["feed"]
    body = (await api.get("/watch", params={"since": start, "timeout": 0.05})).json()
    names = [c["object"]["metadata"]["name"] for c in body["changes"]]
    assert names == ["seen", "missed", "after"]
    assert missed["metadata"]["name"] == "missed"
    _assert_matches_the_store(state)


async def test_a_manager_that_missed_a_commit_requeues_every_key(
    api: httpx.AsyncClient, logs: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    state = broker_state(api)
    lifecycle = state.manager.controllers["lifecycle"]

    def broken(_change: object) -> list[str]:
        raise RuntimeError("a bug in a controller's keys_for")

    with monkeypatch.context() as patched:
        patched.setattr(lifecycle, "keys_for", broken)
        child = job_document("child", depends_on=["parent"])
        resp = await api.post("/apply", json={"documents": [job_document("parent"), child]})

    assert resp.status_code == 200
    assert _failures(logs) == ["manager"]
    waiting = {str(r["object"]["metadata"]["id"]) for r in resp.json()["results"][1:]}
    assert waiting <= _queued(state.manager.queues["lifecycle"])  # keys_all found it again
    _assert_matches_the_store(state)


async def test_an_injected_listener_that_raises_every_time_stops_none_after_it(
    api: httpx.AsyncClient, logs: list[dict[str, Any]]
) -> None:
    state = broker_state(api)

    def always(_changes: object, _events: object) -> None:
        raise OSError(28, "No space left on device")

    def never_recovers() -> None:
        raise OSError(28, "No space left on device")

    state.wiring.listeners.insert(0, Listener("disk", always, never_recovers))
    for name in ("a", "b"):
        assert (await api.post("/jobs", json=job_document(name))).status_code == 201
    await _register(api, "gpu-1")

    assert _failures(logs) == ["disk"] * 3
    assert _failures(logs, "listener_resync_failed") == ["disk"] * 3
    assert state.wiring.failures == {"disk": 6} and state.wiring.stale == {"disk"}
    _assert_matches_the_store(state)
    assert len(_events_file(state)) == len(state.store.list_events())


def test_the_lease_table_follows_the_stored_workers(tmp_path: Path) -> None:
    config = BrokerConfig(data_dir=tmp_path / "data", log_dir=tmp_path / "logs", token=TOKEN)
    state = BrokerState(config)
    try:
        ctx = state.ctx
        for name in ("gpu-1", "gpu-2"):
            register_worker(ctx, name, WorkerSpec(slots=1), name, "x")
        ctx.leases.pop("gpu-2")
        ctx.leases["gone"] = ctx.clock.now()
        before = dict(ctx.leases)

        state.wiring.resync({"leases"})

        assert set(ctx.leases) == {"gpu-1", "gpu-2"}
        assert ctx.leases["gpu-1"] == before["gpu-1"]
        assert ctx.leases["gpu-2"] >= before["gpu-1"]  # a full lease from now
    finally:
        state.close()
