"""The worker's reports reach a real broker in batches, in order, retried or refused.

BrokerLink talks to the broker app in-process through httpx.ASGITransport, wrapped by a
`Wire` that records every request and its answer, can hold one request open until the
test lets it go, can answer one request 503 itself, and can cut one off after the broker
answered it (the outcome the agent cannot know: a broker killed after its commit). The
broker app answers every request that reaches it. No controllers run (the ASGI lifespan
is not started), so jobs are bound to the worker here, the way the scheduler would.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from jobd.broker.app import create_app
from jobd.broker.state import BrokerConfig
from jobd.wire.client import AsyncClient
from jobd.worker.execution import Execution, Host
from jobd.worker.hooks import Hook, LaunchPlan, default_hooks
from jobd.worker.jobrecord import AttemptPhase
from jobd.worker.jobview import JobView
from jobd.worker.reporting import BrokerLink
from jobd.worker.settings import WorkerSettings
from jobd.worker.shim.containment import ProcessGroup
from jobd.worker.shim.protocol import ExitStatus
from tests.integration.conftest import bind, job_document

pytestmark = pytest.mark.anyio

TOKEN = "test-token"
WORKER = "w1"
REPORTS = f"/workers/{WORKER}/reports"


@dataclass
class Exchange:
    """One request the link made, and what it was answered."""

    method: str
    path: str
    body: Any
    status: int = 0
    answer: Any = None


class Wire(httpx.AsyncBaseTransport):
    """Passes requests to the broker app, recording each; can hold or fail one of them."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner = inner
        self.exchanges: list[Exchange] = []
        self.holding = anyio.Event()  # set once the held request has arrived
        self._release: anyio.Event | None = None
        self._fail_next: int | None = None
        self._cut_next = False

    def cut_next(self) -> None:
        """The next request reaches the app, which applies and answers it; the answer is
        then lost, as when the broker dies between its commit and its answer."""
        self._cut_next = True

    def hold_next(self) -> anyio.Event:
        """The next request waits, unsent to the app, until the returned event is set."""
        self._release = anyio.Event()
        return self._release

    def fail_next(self, status: int) -> None:
        """The next request is answered `status` here, without reaching the app."""
        self._fail_next = status

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        await request.aread()
        exchange = Exchange(
            request.method,
            request.url.path,
            json.loads(request.content) if request.content else None,
        )
        self.exchanges.append(exchange)
        release, self._release = self._release, None
        if release is not None:
            self.holding.set()
            await release.wait()
        if self._fail_next is not None:
            exchange.status, self._fail_next = self._fail_next, None
            exchange.answer = {"detail": "the broker is restarting"}
            return httpx.Response(exchange.status, json=exchange.answer, request=request)
        response = await self.inner.handle_async_request(request)
        await response.aread()
        exchange.status = response.status_code
        exchange.answer = json.loads(response.content) if response.content else None
        if self._cut_next:
            self._cut_next = False
            raise httpx.RemoteProtocolError("Server disconnected without sending a response.")
        return response

    @property
    def report_posts(self) -> list[Exchange]:
        return [e for e in self.exchanges if e.method == "POST" and e.path == REPORTS]


@dataclass
class Broker:
    api: httpx.AsyncClient  # the test's own view of the broker, unrecorded
    wire: Wire
    link: BrokerLink
    jobs: dict[str, int] = field(default_factory=dict)


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[Broker]:
    config = BrokerConfig(data_dir=tmp_path / "data", log_dir=tmp_path / "logs", token=TOKEN)
    app = create_app(config)
    headers = {"Authorization": f"Bearer {TOKEN}"}
    wire = Wire(httpx.ASGITransport(app=app))
    async with (
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://jobd", headers=headers
        ) as api,
        AsyncClient("http://jobd", TOKEN, transport=wire) as client,
    ):
        yield Broker(api, wire, BrokerLink(client=client, worker=WORKER))
    app.state.broker.close()


async def bound_job(api: httpx.AsyncClient, name: str, worker: str = WORKER) -> int:
    job_id = int((await api.post("/jobs", json=job_document(name))).json()["metadata"]["id"])
    bind(api, job_id, worker)
    return job_id


async def phase(api: httpx.AsyncClient, job_id: int) -> str:
    return str((await api.get(f"/jobs/{job_id}")).json()["status"]["phase"])


async def test_reports_made_while_a_request_is_in_flight_go_together_in_the_next(
    broker: Broker,
) -> None:
    api, wire, link = broker.api, broker.wire, broker.link
    a, b = await bound_job(api, "a"), await bound_job(api, "b")
    release = wire.hold_next()
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(link.report, a, "started")
            await wire.holding.wait()
            tg.start_soon(partial(link.report, a, "complete", exit_code=0))
            await anyio.wait_all_tasks_blocked()
            tg.start_soon(link.report, b, "started")
            await anyio.wait_all_tasks_blocked()
            assert len(wire.exchanges) == 1  # both wait for the request in flight
            release.set()
    first, second = wire.report_posts
    assert len(wire.exchanges) == 2
    delivery = {"run": link.run, "seq": 1}
    assert first.body == {
        "reports": [{"job": a, "verb": "started"}],
        "events": [],
        "delivery": delivery,
    }
    assert second.body == {
        "reports": [
            {"job": a, "verb": "complete", "exit_code": 0},
            {"job": b, "verb": "started"},
        ],
        "events": [],
        "delivery": delivery | {"seq": 2},  # the batches are numbered in the agent's run
    }
    assert [r["status"] for r in first.answer["results"] + second.answer["results"]] == [200] * 3
    assert await phase(api, a) == "Succeeded"
    assert await phase(api, b) == "Running"


@pytest.mark.forged_events  # made-up events and fields, as a worker may post
async def test_queued_events_ride_along_with_the_next_report_batch_once(broker: Broker) -> None:
    api, wire, link = broker.api, broker.wire, broker.link
    a = await bound_job(api, "a")
    link.event("process_spawned", a, pid=4242)
    with anyio.fail_after(5):
        await link.report(a, "started")
    link.event("process_exited", a, exit_code=0)
    with anyio.fail_after(5):
        await link.report(a, "complete", exit_code=0)
    first, second = wire.report_posts
    assert len(wire.exchanges) == 2  # no request of their own
    assert [(e["event"], e["job"], e["fields"]) for e in first.body["events"]] == [
        ("process_spawned", a, {"pid": 4242})
    ]
    assert [(e["event"], e["fields"]) for e in second.body["events"]] == [
        ("process_exited", {"exit_code": 0})
    ]
    assert first.answer["events"] == 1 and second.answer["events"] == 1
    spawned = (await api.get("/events", params={"type": "process_spawned"})).json()["items"]
    assert len(spawned) == 1
    assert spawned[0]["worker"] == WORKER and spawned[0]["job"] == a
    assert spawned[0]["pid"] == 4242
    exited = (await api.get("/events", params={"type": "process_exited"})).json()["items"]
    assert [(e["worker"], e["job"], e["exit_code"]) for e in exited] == [(WORKER, a, 0)]
    assert await phase(api, a) == "Succeeded"


@pytest.mark.forged_events  # made-up events and fields, as a worker may post
async def test_an_event_field_json_cannot_say_goes_as_text_and_fails_no_batch(
    broker: Broker,
) -> None:
    """The agent sends plain JSON: a path or a NaN in an event is sent as its text, and the
    batch it rides in (with a report) is taken whole."""
    api, wire, link = broker.api, broker.wire, broker.link
    a = await bound_job(api, "odd")
    link.event("process_spawned", a, where=Path("/tmp/x"), share=float("nan"), ids=(1, 2))
    with anyio.fail_after(5):
        await link.report(a, "started")
    (post,) = wire.report_posts
    assert post.status == 200
    fields = post.body["events"][0]["fields"]
    assert fields == {"where": "/tmp/x", "share": "nan", "ids": [1, 2]}
    assert await phase(api, a) == "Running"


@pytest.mark.forged_events  # made-up events and fields, as a worker may post
async def test_an_event_waits_for_a_report_to_carry_it_before_it_goes_alone(
    broker: Broker,
) -> None:
    api, wire, link = broker.api, broker.wire, broker.link
    a = await bound_job(api, "a")
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(link.ship_events_forever, 0.2)
            link.event("process_spawned", a, pid=1)
            await anyio.wait_all_tasks_blocked()
            await link.report(a, "started")  # takes it along: no request of its own
            link.event("process_spawned", a, pid=2)  # no report follows: it goes alone
            while not any(e.path == "/events" for e in wire.exchanges):
                await anyio.sleep(0.02)
            tg.cancel_scope.cancel()
    assert [e.path for e in wire.exchanges] == [REPORTS, "/events"]
    first, second = wire.exchanges
    assert [e["fields"]["pid"] for e in first.body["events"]] == [1]
    assert [e["fields"]["pid"] for e in second.body["events"]] == [2]
    spawned = (await api.get("/events", params={"type": "process_spawned"})).json()["items"]
    assert [e["pid"] for e in spawned] == [1, 2]


async def test_refused_reports_return_without_retry_and_the_rest_of_the_batch_applies(
    broker: Broker,
) -> None:
    api, wire, link = broker.api, broker.wire, broker.link
    ours = await bound_job(api, "ours")
    theirs = await bound_job(api, "theirs", worker="w2")
    missing = 999_999
    release = wire.hold_next()
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(link.report, ours, "started")
            await wire.holding.wait()
            for call in (
                partial(link.report, theirs, "started"),  # bound to another worker
                partial(link.report, missing, "complete", exit_code=1),  # no such job
                partial(link.report, ours, "complete", exit_code=0),
            ):
                tg.start_soon(call)
                await anyio.wait_all_tasks_blocked()
            release.set()
    first, second = wire.report_posts
    assert len(wire.exchanges) == 2  # nothing was sent again
    assert first.body["reports"] == [{"job": ours, "verb": "started"}]
    assert [(r["job"], r["verb"]) for r in second.body["reports"]] == [
        (theirs, "started"),
        (missing, "complete"),
        (ours, "complete"),
    ]
    assert [r["status"] for r in second.answer["results"]] == [409, 404, 200]
    assert await phase(api, ours) == "Succeeded"
    assert await phase(api, theirs) == "Scheduled"

    with anyio.fail_after(5):
        await link.report(theirs, "complete", exit_code=0)  # refused alone
    assert len(wire.exchanges) == 3
    assert wire.exchanges[-1].answer["results"][0]["status"] == 409
    assert await phase(api, theirs) == "Scheduled"


async def test_a_report_the_broker_failed_on_is_sent_again_until_acknowledged(
    broker: Broker,
) -> None:
    api, wire, link = broker.api, broker.wire, broker.link
    a = await bound_job(api, "a")
    wire.fail_next(503)
    with anyio.fail_after(5):
        await link.report(a, "started", checkpoint_dir="/ckpt/a/")
    failed, sent_again = wire.report_posts
    assert len(wire.exchanges) == 2
    assert failed.status == 503 and sent_again.status == 200
    assert failed.body == sent_again.body
    assert sent_again.body["reports"] == [
        {"job": a, "verb": "started", "checkpoint_dir": "/ckpt/a/"}
    ]
    assert sent_again.answer["results"] == [{"job": a, "status": 200, "phase": "Running"}]
    status = (await api.get(f"/jobs/{a}")).json()["status"]
    assert status["phase"] == "Running" and status["checkpoint_dir"] == "/ckpt/a/"


async def test_a_job_that_ended_is_not_signalled_when_the_broker_says_it_is_over(
    broker: Broker, tmp_path: Path
) -> None:
    """The broker may hear a job's end before the worker forgets it; the watch then shows
    the job terminal, and the agent stops it as unbound: there is nothing left to stop."""
    api, wire = broker.api, broker.wire
    job_id = await bound_job(api, "short")
    job = JobView((await api.get(f"/jobs/{job_id}")).json())
    settings = WorkerSettings(
        name=WORKER,
        slots=1,
        gpus=[],
        checkpoint_root=tmp_path / "ckpt",
        default_grace_s=5,
        state_dir=tmp_path / "state",
    )
    execution = Execution.new(job, Host(settings, ProcessGroup(), broker.link))
    with anyio.fail_after(10):
        await execution.run()
        assert await phase(api, job_id) == "Succeeded"
        await execution.stop("unbound")
        await broker.link.report(job_id, "complete", exit_code=0)  # sends any queued events
    verbs = [r["verb"] for post in wire.report_posts for r in post.body["reports"]]
    events = [e["event"] for post in wire.report_posts for e in post.body.get("events", [])]
    assert "stopping" not in verbs and "signal_sent" not in events
    assert "process_started" in events


class _Recording(Hook):
    """A step added to the list: it sees each stage, in the phase the attempt is in."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, AttemptPhase]] = []

    async def prestart(self, ex: Execution, plan: LaunchPlan) -> None:
        assert plan.env["JOBD_JOB_ID"] == str(ex.job_id)  # the hooks before it have run
        self.seen.append(("prestart", ex.phase))

    async def poststart(self, ex: Execution) -> None:
        self.seen.append(("poststart", ex.phase))

    async def exited(self, ex: Execution, end: ExitStatus) -> None:
        self.seen.append(("exited", ex.phase))

    async def cleanup(self, ex: Execution) -> None:
        self.seen.append(("cleanup", ex.phase))


async def test_a_hook_added_to_the_list_runs_at_each_stage_in_order(
    broker: Broker, tmp_path: Path
) -> None:
    """An attempt's steps are hooks run in order; one more needs no edit to the others."""
    job_id = await bound_job(broker.api, "hooked")
    job = JobView((await broker.api.get(f"/jobs/{job_id}")).json())
    settings = WorkerSettings(
        name=WORKER,
        slots=1,
        gpus=[],
        checkpoint_root=tmp_path / "ckpt",
        default_grace_s=5,
        state_dir=tmp_path / "state",
    )
    recording = _Recording()
    hooks = default_hooks()
    hooks.insert(len(hooks) - 1, recording)  # after the `complete` report, before tidying
    host = Host(settings, ProcessGroup(), broker.link)
    execution = Execution.new(job, host, hooks)
    with anyio.fail_after(10):
        await execution.run()
    assert await phase(broker.api, job_id) == "Succeeded"
    assert recording.seen == [
        ("prestart", AttemptPhase.PREPARING),
        ("poststart", AttemptPhase.RUNNING),
        ("exited", AttemptPhase.REPORTED),
        ("cleanup", AttemptPhase.REPORTED),
    ]
    assert execution.phase is AttemptPhase.DONE


@pytest.mark.forged_events  # made-up events and fields, as a worker may post
async def test_a_batch_sent_again_after_its_answer_was_lost_is_applied_once(
    broker: Broker,
) -> None:
    """The broker applies a batch and its answer never arrives: the agent sends the same
    batch (the same delivery) again, and it is acknowledged with nothing applied twice:
    its events are counted once, the job ends once with one attempt."""
    api, wire, link = broker.api, broker.wire, broker.link
    a = await bound_job(api, "a")
    attempt = (await api.get(f"/jobs/{a}")).json()["status"].get("attempt")
    link.event("process_spawned", a, pid=4242)
    wire.cut_next()
    with anyio.fail_after(5):
        await link.report_many(a, [("started", {}), ("complete", {"exit_code": 0})])
    first, again = wire.report_posts
    assert again.body == first.body  # the same delivery, its events with it
    assert [r["phase"] for r in first.answer["results"]] == ["Running", "Succeeded"]
    # Acknowledged, each report with where its job stands now.
    assert [(r["status"], r["phase"]) for r in again.answer["results"]] == [(200, "Succeeded")] * 2
    spawned = (await api.get("/events", params={"type": "process_spawned"})).json()["items"]
    assert len(spawned) == 1
    job = (await api.get(f"/jobs/{a}")).json()
    assert job["status"]["phase"] == "Succeeded"
    assert job["status"].get("attempt") == attempt  # no second run of it
    for kind in ("job_started", "job_finished"):
        found = (await api.get("/events", params={"type": kind, "job": a})).json()["items"]
        assert len(found) == 1, kind


@pytest.mark.forged_events  # made-up events and fields, as a worker may post
async def test_the_broker_applies_a_delivery_once_and_a_batch_without_one_each_time(
    broker: Broker,
) -> None:
    """What the receipt adds: the same events posted twice are recorded twice unless the
    batch names its delivery; a new delivery of the same run is applied."""
    api = broker.api
    event = {"event": "process_spawned", "job": None, "fields": {"pid": 1}}
    delivery = {"run": "run1", "seq": 1}
    bodies = [
        {"reports": [], "events": [event]},
        {"reports": [], "events": [event]},
        {"reports": [], "events": [event], "delivery": delivery},
        {"reports": [], "events": [event], "delivery": delivery},
        {"reports": [], "events": [event], "delivery": delivery | {"seq": 2}},
    ]
    answers = [(await api.post(REPORTS, json=body)).json() for body in bodies]
    assert [answer["events"] for answer in answers] == [1] * 5  # the repeat answered alike
    spawned = (await api.get("/events", params={"type": "process_spawned"})).json()["items"]
    assert len(spawned) == 4  # twice without a delivery, seq 1 once, seq 2 once
    for seq in (1, 1, 2):  # the events' own requests, likewise
        body = {"worker": WORKER, "events": [event], "delivery": {"run": "run1", "seq": seq}}
        assert (await api.post("/events", json=body)).json() == {"accepted": 1}
    spawned = (await api.get("/events", params={"type": "process_spawned"})).json()["items"]
    assert len(spawned) == 6
