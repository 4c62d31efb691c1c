"""A worker's watch with `skip_own_reports=true` (the agent's) passes what its agent may act
on — a job bound to it, a stop asked (a signal, before or after it started) — and leaves
out the changes its own `started`, `progress` and `complete` reports make: the watch
does not wake for them, and goes on to the next change that counts. Without the flag every
change passes.

The broker app in-process (httpx.ASGITransport), no controllers running: jobs are bound
here as the scheduler would bind them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from jobd.broker.app import create_app
from jobd.broker.state import BrokerConfig
from tests.integration.conftest import bind, job_document

pytestmark = pytest.mark.anyio

TOKEN = "test-token"
WORKER = "w1"


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    config = BrokerConfig(data_dir=tmp_path / "data", log_dir=tmp_path / "logs", token=TOKEN)
    app = create_app(config)
    headers = {"Authorization": f"Bearer {TOKEN}"}
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://jobd", headers=headers) as c:
        yield c
    app.state.broker.close()


async def _report(api: httpx.AsyncClient, job_id: int, verb: str, **body: Any) -> None:
    item = {"job": job_id, "verb": verb, **body}
    answer = await api.post(f"/workers/{WORKER}/reports", json={"reports": [item]})
    assert answer.status_code == 200, answer.text
    assert all(result["status"] < 300 for result in answer.json()["results"]), answer.text


async def _watch(api: httpx.AsyncClient, since: int, **params: Any) -> tuple[int, list[str]]:
    """The page's revision, and each change as `id:phase:signal`."""
    query = {"since": since, "worker": WORKER, "kind": "Job", "timeout": 0, **params}
    page = (await api.get("/watch", params=query)).json()
    seen = []
    for change in page["changes"]:
        job = change["object"]
        seen.append(
            f"{job['metadata']['id']}:{job['status']['phase']}:{job['status'].get('signal')}"
        )
    return page["revision"], seen


async def test_the_agents_watch_leaves_out_its_own_reports_of_a_running_job(
    api: httpx.AsyncClient,
) -> None:
    start = (await api.get("/watch", params={"since": 0, "timeout": 0})).json()["revision"]
    job_id = int((await api.post("/jobs", json=job_document("a"))).json()["metadata"]["id"])
    bind(api, job_id, WORKER)
    await _report(api, job_id, "started")
    await _report(api, job_id, "progress", step=1, total=10)
    await _report(api, job_id, "progress", step=2, total=10)
    after_reports, skipped = await _watch(api, start, skip_own_reports="true")
    assert skipped == [f"{job_id}:Scheduled:None"]  # the bind only

    # Nothing new for the agent since: an empty page, at the newest revision it passed.
    again, nothing = await _watch(api, after_reports, skip_own_reports="true")
    assert nothing == [] and again >= after_reports

    await _report(api, job_id, "complete", exit_code=0)  # its own end: left out too
    at_end, nothing = await _watch(api, after_reports, skip_own_reports="true")
    assert nothing == [] and at_end > after_reports

    stopped = int((await api.post("/jobs", json=job_document("b"))).json()["metadata"]["id"])
    bind(api, stopped, WORKER)
    await _report(api, stopped, "started")
    assert (await api.post(f"/jobs/{stopped}/cancel")).status_code == 200
    await _report(api, stopped, "complete", exit_code=143)
    never = int((await api.post("/jobs", json=job_document("c"))).json()["metadata"]["id"])
    bind(api, never, WORKER)
    assert (await api.post(f"/jobs/{never}/cancel")).status_code == 200
    _, then = await _watch(api, at_end, skip_own_reports="true")
    assert then == [
        f"{stopped}:Scheduled:None",
        f"{stopped}:Running:cancel",  # a stop asked: the agent acts on it
        f"{stopped}:Cancelled:cancel",
        f"{never}:Scheduled:None",
        f"{never}:Scheduled:cancel",  # bound here: its agent says it is over, never run
    ]

    _, everything = await _watch(api, start)  # without the flag: every change
    assert everything[:5] == [
        f"{job_id}:Scheduled:None",
        f"{job_id}:Running:None",
        f"{job_id}:Running:None",
        f"{job_id}:Running:None",
        f"{job_id}:Succeeded:None",
    ]


async def test_a_bad_skip_own_reports_is_refused_naming_it(api: httpx.AsyncClient) -> None:
    answer = await api.get("/watch", params={"since": 0, "skip_own_reports": "maybe"})
    assert answer.status_code == 422 and "skip_own_reports" in answer.text
