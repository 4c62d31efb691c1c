"""A standby broker's answers through its own ASGI app, on a real PostgreSQL store.

`FastRoutes` checks, in this order, a worker payload's protocol (426), the body cap (413)
and whether this broker leads (307 to the leader): one layer, in the order the separate
layers had. A read is served by the standby itself.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from jobd.broker.state import BrokerConfig
from jobd.wire import routes
from jobd.wire.protocol import PROTOCOL, PROTOCOL_HEADER
from tests.integration.conftest import TOKEN, broker_client

pytestmark = [pytest.mark.postgres, pytest.mark.anyio]

JOB = {"apiVersion": "jobd/v1", "kind": "Job", "spec": {"command": ["true"]}}


def _config(tmp_path: Path, url: str, name: str) -> BrokerConfig:
    return BrokerConfig(
        data_dir=tmp_path / name / "data",
        log_dir=tmp_path / name / "logs",
        db_url=url,
        token=TOKEN,
        advertise_url=f"http://{name}",
    )


@pytest.fixture
async def standby(tmp_path: Path, postgres_url: str) -> AsyncIterator[httpx.AsyncClient]:
    """The API of broker b, standing by while broker a leads the same store."""
    async with broker_client(_config(tmp_path, postgres_url, "a")) as leader:
        assert leader._transport.app.state.broker.leadership.is_leader  # type: ignore[attr-defined]
        async with broker_client(_config(tmp_path, postgres_url, "b")) as client:
            yield client


async def test_a_write_is_sent_to_the_leader_and_a_read_is_served(
    standby: httpx.AsyncClient,
) -> None:
    sent = await standby.post("/jobs?dry_run=false", json=JOB)
    assert sent.status_code == 307
    assert sent.headers["location"] == "http://a/jobs?dry_run=false"
    assert sent.headers["x-jobd-leader"] == "http://a"
    listed = await standby.get("/jobs")
    assert listed.status_code == 200 and listed.json()["items"] == []


async def test_a_worker_of_another_protocol_is_refused_before_it_is_redirected(
    standby: httpx.AsyncClient,
) -> None:
    beat = "/workers/w1/heartbeat"
    refused = await standby.post(beat, json={"running": []}, headers={PROTOCOL_HEADER: "0"})
    assert refused.status_code == 426
    taken = await standby.post(beat, json={"running": []}, headers={PROTOCOL_HEADER: str(PROTOCOL)})
    assert taken.status_code == 307


async def test_a_body_over_its_cap_is_refused_before_it_is_redirected(
    standby: httpx.AsyncClient,
) -> None:
    cap = routes.CREATE_JOB.max_body
    refused = await standby.post("/jobs", content=b" " * (cap + 1))
    assert refused.status_code == 413
