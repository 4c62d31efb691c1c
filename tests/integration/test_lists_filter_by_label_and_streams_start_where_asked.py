"""The API behind `job get -l`, `job events -f` and `job logs --tail/--since`: a label
selector on the jobs list, events from now on, and reads of output that start late."""

from __future__ import annotations

import struct
import time

import anyio
import httpx
import pytest

from tests.integration.conftest import bind, broker_state, job_document, wait_entered

pytestmark = pytest.mark.anyio


def _labelled(name: str, **labels: str) -> dict[str, object]:
    doc = job_document(name)
    doc["metadata"] = {"name": name, "labels": labels}
    return doc


async def test_the_jobs_list_takes_a_label_selector(api: httpx.AsyncClient) -> None:
    for doc in (
        _labelled("a", team="vision", tier="batch"),
        _labelled("b", team="vision"),
        _labelled("c", team="nlp", tier="batch"),
        _labelled("d"),
    ):
        assert (await api.post("/jobs", json=doc)).status_code == 201

    async def names(selector: str, **params: object) -> list[str]:
        resp = await api.get("/jobs", params={"selector": selector, **params})
        assert resp.status_code == 200, resp.text
        return [j["metadata"]["name"] for j in resp.json()["items"]]

    assert await names("team=vision") == ["a", "b"]
    assert await names("team=vision,tier=batch") == ["a"]
    assert await names("team!=vision") == ["c", "d"]
    assert await names("tier") == ["a", "c"]
    assert await names("!team") == ["d"]
    assert await names("team=vision", limit=1) == ["a"]
    assert await names("tier", limit=1, phase="Pending") == ["a"]


@pytest.mark.parametrize("selector", ["", "=x", "a,,b"])
async def test_a_selector_that_is_none_gets_422_naming_it(
    api: httpx.AsyncClient, selector: str
) -> None:
    resp = await api.get("/jobs", params={"selector": selector})

    assert resp.status_code == 422
    assert resp.json()["detail"].startswith("selector: ")


async def test_events_from_now_answer_only_what_comes_after(
    api: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    await api.post("/jobs", json=job_document("before"))
    following = wait_entered(monkeypatch, broker_state(api).feed.events_added)
    assert broker_state(api).store.last_event_seq() > 0

    async def follow() -> list[dict[str, object]]:
        params = {"from_now": "true", "follow": "true", "timeout": 5}
        resp = await api.get("/events", params=params)
        return list(resp.json()["items"])

    async with anyio.create_task_group() as tg:
        found: list[list[dict[str, object]]] = []

        async def run() -> None:
            found.append(await follow())

        tg.start_soon(run)
        await following.wait()  # the request took "now" and waits for what comes after
        await api.post("/jobs", json=job_document("after"))

    assert [e.get("name") for e in found[0]] == ["after"]
    quiet = (await api.get("/events", params={"from_now": "true"})).json()
    assert quiet["items"] == [] and quiet["last"] == broker_state(api).store.last_event_seq()


async def test_a_log_read_starts_at_the_last_lines_or_the_last_seconds(
    api: httpx.AsyncClient,
) -> None:
    job_id = (await api.post("/jobs", json=job_document("l"))).json()["metadata"]["id"]
    bind(api, job_id, "w1")
    await api.post(f"/jobs/{job_id}/logs", params={"offset": 0}, content=b"old 1\nold 2\n")
    times = broker_state(api).logs.times(job_id).path
    assert times.stat().st_size == 16  # one record: (offset, arrival)
    times.write_bytes(struct.pack("<Qd", 0, time.time() - 3600))  # as if an hour ago
    await api.post(f"/jobs/{job_id}/logs", params={"offset": 12}, content=b"new 1\nnew 2\n")

    async def read(**params: object) -> bytes:
        resp = await api.get(f"/jobs/{job_id}/logs", params=params)
        assert resp.status_code == 200, resp.text
        assert resp.headers["X-Jobd-Offset"] == "24"
        return resp.content

    assert await read(since_s=600) == b"new 1\nnew 2\n"
    assert await read(since_s=7200) == b"old 1\nold 2\nnew 1\nnew 2\n"
    assert await read(tail=3) == b"old 2\nnew 1\nnew 2\n"
    assert await read(tail=1, since_s=7200) == b"new 2\n"  # both: the later start
    assert await read(tail=0) == b""
    assert (await api.get(f"/jobs/{job_id}/logs", params={"since_s": -1})).status_code == 422
