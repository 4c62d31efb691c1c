"""jobd.wire: one declaration per route and per report, light enough for the worker."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import httpx
import pytest
from pydantic import ValidationError

from jobd.wire import calls, routes
from jobd.wire.client import ApiError, AsyncClient, BrokerUnreachable, Client
from jobd.wire.models import (
    BATCHED_REPORTS,
    REPORT_BODIES,
    Completion,
    Heartbeat,
    Report,
    ReportBatch,
    _batched_reports,
)

pytestmark = pytest.mark.anyio


def test_the_wire_imports_no_server_library() -> None:
    code = "import jobd.wire, sys, json; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = json.loads(out.stdout)
    for heavy in ("fastapi", "starlette", "sqlalchemy", "jobd.store", "jobd.broker"):
        assert not [m for m in loaded if m == heavy or m.startswith(heavy + ".")], heavy
    assert "jobd.controllers" not in loaded


def test_a_batched_report_carries_its_verbs_fields_but_the_worker() -> None:
    for verb, body in REPORT_BODIES.items():
        fields = set(BATCHED_REPORTS[verb].model_fields)
        assert fields == {"job", "verb"} | (set(body.model_fields) - {"worker"})
    item = ReportBatch.model_validate({"reports": [{"job": 3, "verb": "complete", "exit_code": 0}]})
    assert item.reports[0].model_dump(exclude_unset=True) == {
        "job": 3,
        "verb": "complete",
        "exit_code": 0,
    }


def test_a_field_added_to_one_report_reaches_the_batch() -> None:
    class Stopping(Report):
        reason: str | None = None

    batched = _batched_reports({**REPORT_BODIES, "stopping": Stopping})["stopping"]
    item = batched.model_validate({"job": 1, "verb": "stopping", "reason": "preempt"})
    assert item.model_dump(exclude_unset=True)["reason"] == "preempt"


def test_a_batched_report_refuses_an_unknown_verb_or_field() -> None:
    with pytest.raises(ValidationError, match="verb"):
        ReportBatch.model_validate({"reports": [{"job": 1, "verb": "exploded"}]})
    with pytest.raises(ValidationError, match="extra"):
        ReportBatch.model_validate({"reports": [{"job": 1, "verb": "started", "exit_cod": 1}]})
    with pytest.raises(ValidationError, match="extra"):  # another verb's field
        ReportBatch.model_validate({"reports": [{"job": 1, "verb": "started", "exit_code": 1}]})


def test_each_report_has_its_route_ending_in_its_verb() -> None:
    assert set(routes.REPORTS) == set(REPORT_BODIES)
    for verb, route in routes.REPORTS.items():
        assert route.url(job_id=7) == f"/jobs/7/{verb}"
        assert route.body is REPORT_BODIES[verb]


def test_routes_are_unique_and_fill_their_parameters() -> None:
    keys = [(r.method, r.path) for r in routes.ROUTES]
    assert len(keys) == len(set(keys))
    assert routes.GET_JOB.url(job_id=12) == "/jobs/12"
    assert routes.HEARTBEAT.params == ("name",)
    assert routes.HEARTBEAT.url(name="gpu-1") == "/workers/gpu-1/heartbeat"
    assert sorted(routes.PUBLIC_PATHS) == ["/healthz", "/metrics", "/readyz"]


# -- the clients: one request per call, the same on both


def recording(answers: dict[str, Any], seen: list[httpx.Request]) -> Any:
    """A transport's handler: records each request, answers 200 with the path's JSON."""

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json=answers[request.url.path])

    return handle


async def test_sync_and_async_clients_send_a_call_as_the_same_request() -> None:
    answer = {"worker": {}, "stop": [4]}
    sync_seen: list[httpx.Request] = []
    async_seen: list[httpx.Request] = []
    path = routes.HEARTBEAT.url(name="w1")
    call = calls.heartbeat("w1", Heartbeat(running=[4, 5]))
    with Client(
        "http://b", "tok", transport=httpx.MockTransport(recording({path: answer}, sync_seen))
    ) as c:
        assert c.run(call).stop == [4]
    transport = httpx.MockTransport(recording({path: answer}, async_seen))
    async with AsyncClient("http://b", "tok", transport=transport) as ac:
        assert (await ac.run(call)).stop == [4]
    for seen in (sync_seen, async_seen):
        (request,) = seen
        assert (request.method, request.url.path) == ("POST", path)
        assert request.headers["authorization"] == "Bearer tok"
        assert request.headers["content-type"] == "application/json"
        assert json.loads(request.content) == {"running": [4, 5]}


async def test_the_async_client_maps_refusals_and_silence_like_the_sync_one() -> None:
    refuse = httpx.MockTransport(lambda r: httpx.Response(409, json={"detail": "not yours"}))
    async with AsyncClient("http://b", None, transport=refuse) as client:
        with pytest.raises(ApiError) as caught:
            await client.run(calls.get_job(1))
    assert (caught.value.status, caught.value.message) == (409, "not yours")

    def cut(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    async with AsyncClient("http://b", None, transport=httpx.MockTransport(cut)) as client:
        with pytest.raises(BrokerUnreachable, match="cannot reach the jobd broker at http://b"):
            await client.run(calls.get_job(1))


def test_a_held_call_reads_past_the_brokers_hold_but_connects_as_usual() -> None:
    seen: list[httpx.Request] = []
    page = {"revision": 3, "changes": []}
    transport = httpx.MockTransport(recording({"/watch": page}, seen))
    with Client("http://b", None, timeout=5.0, transport=transport) as client:
        client.run(calls.watch(2, worker="w1", timeout=30.0))
    timeout = seen[0].extensions["timeout"]
    assert timeout["read"] == 40.0 and timeout["connect"] == 5.0
    assert dict(seen[0].url.params) == {"since": "2", "worker": "w1", "timeout": "30.0"}


def test_a_report_batch_travels_with_only_the_fields_said() -> None:
    item = BATCHED_REPORTS["started"].model_validate({"job": 1, "verb": "started"})
    call = calls.send_reports("w1", ReportBatch(reports=[item], events=[]))
    assert call.content is not None
    assert json.loads(call.content) == {"reports": [{"job": 1, "verb": "started"}], "events": []}
    assert Completion.model_validate({"worker": "w1", "signal": 9}).signal == 9
