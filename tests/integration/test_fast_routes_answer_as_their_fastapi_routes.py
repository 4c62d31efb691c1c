"""A fast route answers the same whether the fast path or FastAPI's routing serves it.

The app as built serves the hot routes through FastRoutes, ahead of FastAPI. The same
requests are sent to FastAPI's router directly (past every middleware), where the routes
`fastpath.declare` made for the OpenAPI document answer them. Both must agree on status
and body, for good requests and bad ones.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.types import Receive, Scope, Send

from jobd.broker.app import create_app
from jobd.broker.auth.access import PRINCIPAL
from jobd.broker.state import BrokerConfig
from jobd.wire import routes
from tests.integration.conftest import bind, job_document

pytestmark = pytest.mark.anyio

TOKEN = "test-token"


class _RouterOnly:
    """FastAPI's router alone, as the app's own routing would reach it (with the admin
    principal the auth middleware would have found)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        scope["app"] = self.app
        scope[PRINCIPAL] = self.app.state.broker.tokens.builtin
        await self.app.router(scope, receive, send)


@pytest.fixture
async def both(tmp_path: Path) -> AsyncIterator[tuple[httpx.AsyncClient, httpx.AsyncClient]]:
    app = create_app(BrokerConfig(data_dir=tmp_path / "d", log_dir=tmp_path / "l", token=TOKEN))
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with (
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://jobd", headers=headers
        ) as fast,
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=_RouterOnly(app)),
            base_url="http://jobd",
            headers=headers,
        ) as routed,
    ):
        yield fast, routed
    app.state.broker.close()


async def same(
    both: tuple[httpx.AsyncClient, httpx.AsyncClient], method: str, url: str, **kw: Any
) -> httpx.Response:
    fast, routed = both
    a = await fast.request(method, url, **kw)
    b = await routed.request(method, url, **kw)
    assert (a.status_code, a.json()) == (b.status_code, b.json()), url
    return a


async def test_creates_answer_alike_on_both_paths(
    both: tuple[httpx.AsyncClient, httpx.AsyncClient],
) -> None:
    fast, routed = both
    created = await fast.post(routes.CREATE_JOB.url(), json=job_document("a"))
    again = await routed.post(routes.CREATE_JOB.url(), json=job_document("b"))
    assert (created.status_code, again.status_code) == (201, 201)
    assert created.json().keys() == again.json().keys()
    duplicate = await same(both, "POST", routes.CREATE_JOB.url(), json=job_document("a"))
    assert duplicate.status_code == 409
    typo = await same(both, "POST", "/jobs", json={**job_document("t"), "spce": {}})
    assert typo.json() == {"detail": "spce: unknown field"}
    broken = await same(both, "POST", "/jobs", content=b"{not json")
    assert broken.status_code == 422
    # Bodies are capped ahead of both paths (broker/http/bodylimit.py), not by either.
    huge = await fast.post("/jobs", content=b"{" + b" " * (2 * 1024 * 1024) + b"}")
    assert huge.status_code == 413
    assert huge.json() == {"detail": "body: larger than this route's cap of 1,048,576 bytes"}


async def test_worker_routes_answer_alike_on_both_paths(
    both: tuple[httpx.AsyncClient, httpx.AsyncClient],
) -> None:
    fast, _ = both
    job = (await fast.post("/jobs", json=job_document("r"))).json()["metadata"]["id"]
    bind(fast, job, "w2")
    batch = {"reports": [{"job": job, "verb": "started"}], "events": []}
    refused = await same(both, "POST", routes.REPORT_BATCH.url(name="w1"), json=batch)
    assert refused.json()["results"][0]["status"] == 409
    unknown = {"reports": [{"job": job, "verb": "exploded"}]}
    bad_verb = await same(both, "POST", routes.REPORT_BATCH.url(name="w1"), json=unknown)
    assert bad_verb.status_code == 422
    beat = await same(both, "POST", routes.HEARTBEAT.url(name="w9"), json={"running": []})
    assert beat.status_code == 404
    typo = await same(both, "POST", routes.HEARTBEAT.url(name="w9"), json={"runing": []})
    assert typo.json() == {"detail": "runing: unknown field"}


async def test_watch_answers_alike_on_both_paths(
    both: tuple[httpx.AsyncClient, httpx.AsyncClient],
) -> None:
    fast, _ = both
    await fast.post("/jobs", json=job_document("w"))
    page = await same(both, "GET", routes.WATCH.url(), params={"since": 0, "timeout": 0})
    assert [c["op"] for c in page.json()["changes"]] == ["ADDED"]
    negative = await same(both, "GET", routes.WATCH.url(), params={"since": -1})
    assert negative.json()["detail"] == "since: Input should be greater than or equal to 0"
