"""A request that does not validate gets 422, naming what is wrong, on every route.

Walks every route of `jobd.wire.routes.ROUTES` with job ids the store cannot hold (past
PostgreSQL's INTEGER job ids, and 2^63 and up), ids no job has (0, -1, words) and names
no resource can have (capitals, spaces, too long), on SQLite and PostgreSQL: none may
answer 5xx, and each bad parameter is a 422 that names it. Store-bound integers in
queries and bodies are walked likewise, and the largest valid values are not refused. The
app is driven in-process with its exceptions turned into responses, as a server does.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from jobd.api.models import MAX_ID, MAX_INT
from jobd.broker.app import create_app
from jobd.broker.state import BrokerConfig
from jobd.wire.routes import ROUTES, Route
from tests.integration.conftest import job_document

pytestmark = pytest.mark.anyio

TOKEN = "test-token"
TOO_BIG = str(MAX_ID + 1)
BAD_IDS = [TOO_BIG, str(2**63), str(2**64), "0", "-1", "12abc", "1e3"]
BAD_NAMES = ["B", "Gpu-Box.lab", "a b", "x" * 64, "-lead", "trail-", "é"]
# A body each route accepts, so what is refused is the path and nothing else.
_BODIES: dict[str, Any] = {
    "/workers/{name}": {"spec": {"slots": 1}},
    "/workers/{name}/heartbeat": {"running": []},
    "/workers/{name}/reports": {"reports": []},
}


@pytest.fixture
async def api(tmp_path: Path, store_url: str) -> AsyncIterator[httpx.AsyncClient]:
    config = BrokerConfig(
        data_dir=tmp_path / "data", log_dir=tmp_path / "logs", db_url=store_url, token=TOKEN
    )
    app = create_app(config)
    await app.state.broker.leadership.campaign()  # on PostgreSQL: elected, not a standby
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with httpx.AsyncClient(transport=transport, base_url="http://jobd", headers=headers) as c:
        yield c
    app.state.broker.close()


def _body(route: Route) -> Any:
    if route.path in _BODIES:
        return _BODIES[route.path]
    return {"worker": "w1"} if route.body is not None else None


def _bad_paths(route: Route) -> list[tuple[str, str, str]]:
    """(url, the bad parameter, its value) for each bad value of each of its parameters."""
    good = {"job_id": "1", "name": "w1"}
    found = []
    for param in route.params:
        for value in BAD_IDS if param == "job_id" else BAD_NAMES:
            url = route.path.format_map({**good, param: value})
            found.append((url, param, value))
    return found


async def test_every_route_refuses_bad_path_parameters_with_422(api: httpx.AsyncClient) -> None:
    walked = 0
    for route in ROUTES:
        for url, param, value in _bad_paths(route):
            answer = await api.request(route.method, url, json=_body(route))
            assert answer.status_code == 422, (route.method, url, answer.text)
            assert answer.json()["detail"].startswith(f"{param}: {value!r}"), answer.text
            walked += 1
    assert walked > 100  # every templated route was walked, not none


async def test_the_largest_id_the_store_holds_is_not_found_not_refused(
    api: httpx.AsyncClient,
) -> None:
    for route in ROUTES:
        if "job_id" not in route.params:
            continue
        url = route.url(job_id=MAX_ID)
        answer = await api.request(route.method, url, json=_body(route))
        assert answer.status_code < 500, (route.method, url, answer.text)
        assert answer.status_code != 422 or "job_id" not in answer.text, answer.text


QUERIES = [
    ("GET", f"/watch?since={MAX_INT + 1}", "since"),
    ("GET", f"/events?after={TOO_BIG}", "after"),
    ("GET", f"/events?job={TOO_BIG}", "job"),
    ("GET", f"/jobs?limit={MAX_INT + 1}", "limit"),
    ("GET", f"/jobs/1/logs?offset={MAX_INT + 1}", "offset"),
    ("POST", f"/jobs/1/logs?offset={MAX_INT + 1}", "offset"),
]


LARGEST = [
    f"/events?after={MAX_ID}&job={MAX_ID}",
    f"/jobs?limit={MAX_INT}",
    f"/watch?since={MAX_INT}&timeout=0",
]


async def test_the_largest_valid_query_values_are_answered(api: httpx.AsyncClient) -> None:
    for url in LARGEST:
        answer = await api.get(url)
        assert answer.status_code == 200, (url, answer.text)


async def test_store_bound_query_integers_are_bounded(api: httpx.AsyncClient) -> None:
    for method, url, field in QUERIES:
        answer = await api.request(method, url)
        assert answer.status_code == 422, (url, answer.text)
        assert answer.json()["detail"].startswith(f"{field}:"), answer.text


BODIES: list[tuple[str, str, Any, str]] = [
    ("POST", "/workers/w1/reports", {"reports": [{"job": MAX_ID + 1, "verb": "started"}]}, ""),
    ("POST", "/events", {"worker": "w1", "events": [{"event": "x", "job": MAX_ID + 1}]}, ""),
    ("POST", "/jobs", job_document("a", depends_on=[MAX_ID + 1]), "spec.depends_on:"),
    (
        "POST",
        "/apply",
        {"documents": [job_document("a", depends_on=[MAX_ID + 1])]},
        "",
    ),
    ("PUT", "/workers/w1", {"spec": {"gpus": [0, -1]}}, "spec.gpus: GPU indices must not"),
    ("PUT", "/workers/w1", {"spec": {"gpus": [1, 1]}}, "spec.gpus: GPU indices must not"),
]


async def test_store_bound_body_integers_and_gpu_indices_are_refused(
    api: httpx.AsyncClient,
) -> None:
    for method, url, body, detail in BODIES:
        answer = await api.request(method, url, json=body)
        assert answer.status_code == 422, (url, answer.text)
        assert answer.json()["detail"].startswith(detail), answer.text
    assert (await api.get("/workers")).json()["items"] == []  # nothing registered
    assert (await api.get("/jobs")).json()["items"] == []  # nothing created


async def test_a_capitalised_worker_name_is_refused_not_registered(
    api: httpx.AsyncClient,
) -> None:
    answer = await api.put("/workers/Gpu-Box.lab", json={"spec": {"slots": 1}})
    assert answer.status_code == 422
    assert "name: 'Gpu-Box.lab' must be 1-63 lowercase" in answer.json()["detail"]
    ok = await api.put("/workers/gpu-box.lab", json={"spec": {"slots": 1}})
    assert ok.status_code == 200, ok.text
    beat = await api.post("/workers/gpu-box.lab/heartbeat", json={"running": [MAX_ID + 1]})
    assert beat.status_code == 422 and beat.json()["detail"].startswith("running.0:"), beat.text
