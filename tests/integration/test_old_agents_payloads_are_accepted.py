"""Mixed versions (wire/protocol.py): what an agent of protocol 1 sends is taken, and a
worker of a protocol the broker does not take is told why, and keeps trying.

`recorded/agent-protocol-1.json` is what a real `jobd worker` sent a real broker for one
job (registration, reports, output, heartbeats: recorded by
`recorded/record_agent_payloads.py`), replayed here against today's broker, with its
header and without it (an agent from before versions were sent). A change that breaks
those agents fails this test; raising `OLDEST_WORKER_PROTOCOL` past 1 must remove the
file with it, on purpose.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from structlog.testing import capture_logs

from jobd.api.models import Phase
from jobd.broker.state import BrokerConfig
from jobd.wire import calls, protocol
from jobd.wire.client import AsyncClient
from jobd.wire.protocol import OLDEST_WORKER_PROTOCOL, PROTOCOL, PROTOCOL_HEADER
from jobd.worker.reporting import BrokerLink
from tests.integration.conftest import TOKEN, broker_client, broker_state, job_document

pytestmark = pytest.mark.anyio

RECORDED = Path(__file__).parent / "recorded" / "agent-protocol-1.json"


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    config = BrokerConfig(data_dir=tmp_path / "data", log_dir=tmp_path / "logs", token=TOKEN)
    async with broker_client(config) as client:
        yield client


def _bind_first_attempt(api: httpx.AsyncClient, job_id: int, worker: str) -> None:
    """The job bound to `worker` at attempt 1, as the scheduler's bind leaves it (the
    app's loops do not run here)."""
    store = broker_state(api).store
    found = store.get_job(job_id)
    assert found is not None
    bound = found.evolve()
    bound.status.phase, bound.status.worker, bound.status.attempt = Phase.SCHEDULED, worker, 1
    store.update_job(bound)


async def _replay(api: httpx.AsyncClient, request: dict[str, Any], stated: bool) -> Any:
    headers = {"Content-Type": request["content_type"] or "application/octet-stream"}
    if stated and request["protocol"] is not None:
        headers[PROTOCOL_HEADER] = request["protocol"]
    answer = await api.request(
        request["method"], request["target"], content=request["body"].encode("latin-1"),
        headers=headers,
    )  # fmt: skip
    assert answer.status_code < 300, (request["target"], answer.text)
    return answer.json()


@pytest.mark.parametrize("stated", [True, False], ids=["protocol-1", "no-header"])
async def test_a_recorded_agent_of_protocol_1_runs_its_job_through(
    api: httpx.AsyncClient, tmp_path: Path, stated: bool
) -> None:
    recorded = json.loads(RECORDED.read_text())
    assert OLDEST_WORKER_PROTOCOL <= 1 <= PROTOCOL
    assert {r["protocol"] for r in recorded} == {"1"}
    created = await api.post("/jobs", json=job_document("recorded", cwd=str(tmp_path)))
    job_id = created.json()["metadata"]["id"]
    assert job_id == 1  # the id the recording's reports name

    registration, *rest = recorded
    assert registration["method"] == "PUT"
    await _replay(api, registration, stated)
    _bind_first_attempt(api, job_id, "w1")
    for request in rest:
        answer = await _replay(api, request, stated)
        if request["target"].endswith("/reports"):
            assert all(item["status"] < 300 for item in answer["results"]), answer
        if request["target"].endswith("/heartbeat"):
            assert job_id not in answer["stop"], answer  # the job is known to be ours

    job = (await api.get(f"/jobs/{job_id}")).json()
    assert job["status"]["phase"] == "Failed" and job["status"]["exit_code"] == 3
    assert job["status"]["attempt"] == 1
    logs = await api.get(f"/jobs/{job_id}/logs")
    assert logs.text.startswith("hello")


@pytest.mark.parametrize(
    ("stated", "status", "said"),
    [
        ("0", 426, "this worker speaks jobd protocol 0, and this broker takes worker "
                   f"protocols {OLDEST_WORKER_PROTOCOL} to {PROTOCOL}: upgrade jobd on this "
                   "worker's host"),
        (str(PROTOCOL + 1), 426, f"speaks jobd protocol {PROTOCOL + 1}, and this broker "
                                 "takes worker protocols"),
        ("one", 422, "X-Jobd-Protocol: 'one' is not a protocol version (an integer)"),
    ],
)  # fmt: skip
async def test_a_worker_payload_of_another_protocol_is_refused_naming_both(
    api: httpx.AsyncClient, stated: str, status: int, said: str
) -> None:
    refused = await api.post(
        "/workers/w1/heartbeat", json={"running": []}, headers={PROTOCOL_HEADER: stated}
    )
    assert refused.status_code == status
    assert said in refused.json()["detail"]
    if status == 426:
        assert refused.headers[PROTOCOL_HEADER] == str(PROTOCOL)
        assert refused.headers["X-Jobd-Protocol-Oldest-Worker"] == str(OLDEST_WORKER_PROTOCOL)
    assert broker_state(api).store.get_worker("w1") is None  # nothing was taken


async def test_a_users_request_is_taken_whatever_protocol_it_states(
    api: httpx.AsyncClient,
) -> None:
    for stated in ("0", "99", "one"):
        listed = await api.get("/jobs", headers={PROTOCOL_HEADER: stated})
        assert listed.status_code == 200


async def test_a_refused_agent_says_so_once_a_minute_and_keeps_trying(
    api: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(protocol, "PROTOCOL", 0)  # an agent older than the broker takes
    app = api._transport.app  # type: ignore[attr-defined]
    now = [1000.0]
    sent: list[int] = []

    def counting(request: httpx.Request) -> None:
        sent.append(1)

    transport = httpx.ASGITransport(app=app)
    async with AsyncClient("http://jobd", TOKEN, transport=transport) as client:
        client._http.event_hooks["request"].append(_async(counting))
        link = BrokerLink(client, "w1", "instance-1", clock=lambda: now[0])
        register = calls.register_worker("w1", {"spec": {}, "hostname": "h"})
        with capture_logs() as logs:
            with anyio.move_on_after(0.5):
                await link.call(register, fenced=True)
            now[0] += 61  # a minute on: said once more
            with anyio.move_on_after(0.3):
                await link.call(register, fenced=True)
    said = [entry for entry in logs if entry["event"] == "protocol_refused"]
    assert len(said) == 2 and len(sent) >= 5  # retried all along, said twice
    assert "speaks jobd protocol 0" in said[0]["detail"] and said[0]["log_level"] == "error"
    assert broker_state(api).store.get_worker("w1") is None


def _async(hook: Any) -> Any:
    async def run(request: httpx.Request) -> None:
        hook(request)

    return run
