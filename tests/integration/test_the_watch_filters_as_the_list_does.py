"""The watch takes a listing's filters (project, name, phase, label selector), so a client
that lists and then watches (the wire's informer: `job get -w`, `job wait`) gets from the
broker only the changes of the jobs its list showed, and never filters them itself."""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import pytest

from jobd.wire.client import AsyncClient
from jobd.wire.informer import AsyncInformer, Delta, JobFilter
from tests.integration.conftest import TOKEN, bind, job_document

pytestmark = pytest.mark.anyio


def _labelled(name: str, project: str | None = None, **labels: str) -> dict[str, Any]:
    doc = job_document(name)
    doc["metadata"] = {"name": name, "labels": labels}
    if project is not None:
        doc["metadata"]["project"] = project
    return doc


async def _create(api: httpx.AsyncClient, doc: dict[str, Any]) -> int:
    resp = await api.post("/jobs", json=doc)
    assert resp.status_code == 201, resp.text
    return int(resp.json()["metadata"]["id"])


async def _watched(api: httpx.AsyncClient, **params: Any) -> list[tuple[str, str]]:
    resp = await api.get("/watch", params={"since": 0, "timeout": 0, **params})
    assert resp.status_code == 200, resp.text
    return [(c["op"], c["object"]["metadata"]["name"]) for c in resp.json()["changes"]]


async def test_each_filter_of_the_list_filters_the_watch(api: httpx.AsyncClient) -> None:
    a = await _create(api, _labelled("a", team="vision"))
    await _create(api, _labelled("b", team="nlp"))
    await _create(api, _labelled("c", "other", team="vision"))
    bind(api, a, "w1")  # a: Pending, then Scheduled

    assert await _watched(api, selector="team=vision") == [
        ("ADDED", "a"),
        ("ADDED", "c"),
        ("MODIFIED", "a"),
    ]
    assert await _watched(api, name="a") == [("ADDED", "a"), ("MODIFIED", "a")]
    assert await _watched(api, project="other") == [("ADDED", "c")]
    assert await _watched(api, phase="Scheduled") == [("MODIFIED", "a")]
    both = [("phase", "Pending"), ("phase", "Scheduled"), ("since", 0), ("timeout", 0)]
    resp = await api.get("/watch", params=both)
    assert [c["object"]["metadata"]["name"] for c in resp.json()["changes"]] == list("abca")
    assert await _watched(api, selector="!team") == []


async def test_a_filter_of_the_watch_is_checked_as_the_lists(api: httpx.AsyncClient) -> None:
    bad = await api.get("/watch", params={"selector": "a,,b"})
    assert bad.status_code == 422 and bad.json()["detail"].startswith("selector: ")
    phase = await api.get("/watch", params={"phase": "Sleeping"})
    assert phase.status_code == 422 and phase.json()["detail"].startswith("phase")


async def test_the_informer_follows_what_its_filter_selects(api: httpx.AsyncClient) -> None:
    await _create(api, _labelled("old", team="vision"))
    await _create(api, _labelled("elsewhere", team="nlp"))
    transport = api._transport  # the broker's ASGI app, in process
    client = AsyncClient("http://jobd", TOKEN, transport=transport)
    seen: list[Delta] = []
    informer = AsyncInformer(client, JobFilter(selector="team=vision"))

    async with anyio.create_task_group() as tg:
        tg.start_soon(informer.run, seen.append)
        await informer.synced.wait()
        await _create(api, _labelled("other", team="nlp"))  # the broker passes it over
        await _create(api, _labelled("new", team="vision"))
        with anyio.fail_after(10):
            while len(seen) < 2:
                await anyio.sleep(0.01)
        tg.cancel_scope.cancel()

    assert [(d.op, d.object["metadata"]["name"]) for d in seen] == [
        ("ADDED", "old"),
        ("ADDED", "new"),
    ]


async def test_a_user_watching_another_project_is_refused_as_its_list(
    api: httpx.AsyncClient,
) -> None:
    made = await api.post("/tokens", json={"role": "user", "projects": ["a"], "name": "alice"})
    assert made.status_code == 201, made.text
    alice = {"Authorization": f"Bearer {made.json()['token']}"}

    listed = await api.get("/jobs", params={"project": "b"}, headers=alice)
    watched = await api.get("/watch", params={"project": "b", "timeout": 0}, headers=alice)
    own = await api.get("/watch", params={"project": "a", "timeout": 0}, headers=alice)

    assert listed.status_code == watched.status_code == 403
    assert watched.json()["detail"] == listed.json()["detail"]
    assert own.status_code == 200
