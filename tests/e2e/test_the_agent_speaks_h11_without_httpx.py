"""The agent's plain client (jobd/wire/plain_async.py, h11 on anyio) against a real `jobd
dev`: it gets what the wire's httpx `AsyncClient` gets, refusals (4xx and 5xx) worded the
same; a long-poll and other calls share it at once, each on its own connection; a broker
restarted between two calls is reached again; a call the broker holds past the read
timeout, or one that waits for a connection too long, is said as httpx says it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from jobd.wire import calls
from jobd.wire.calls import Call
from jobd.wire.client import AsyncClient
from jobd.wire.errors import ApiError, BrokerUnreachable
from jobd.wire.models import Heartbeat, WorkerEvent, WorkerEvents
from jobd.wire.plain_async import PlainAsyncClient
from tests.e2e.harness import Jobd, _free_port, _launch, _ready, manifest, start_jobd, stop_jobd

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def jobd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Jobd]:
    running = start_jobd(tmp_path_factory.mktemp("agentwire"))
    unrunnable = {"resources": {"gpus": 64}}  # no job runs: nothing moves under the reads
    documents = [manifest(f"wire-{i}", ["true"], **unrunnable) for i in range(3)]
    (running.root / "jobs.yaml").write_text("\n---\n".join(documents))
    running.ok("apply", "-f", str(running.root / "jobs.yaml"))
    yield running
    stop_jobd(running)


def _token(jobd: Jobd) -> str:
    return (jobd.root / "data" / "admin.token").read_text().strip()


def _plain(value: Any) -> Any:
    """An answer as plain data, whatever envelope holds it."""
    if isinstance(value, list):
        return [_plain(v) for v in value]
    fields = getattr(value, "__dataclass_fields__", None) or getattr(value, "__slots__", None)
    if fields is not None and not isinstance(value, dict):
        return {name: _plain(getattr(value, name)) for name in fields}
    return value


async def _outcome(send: Callable[[Call[Any]], Awaitable[Any]], call: Call[Any]) -> Any:
    """The call's answer as plain data, or its refusal as (status, message)."""
    try:
        return _plain(await send(call))
    except ApiError as exc:
        return ("refused", exc.status, exc.message)


def _same_calls(jobd: Jobd, first: int, revision: int) -> list[Call[Any]]:
    events = WorkerEvents(worker="w1", events=[WorkerEvent(event="wire_probe", job=first)])
    return [
        calls.list_jobs(phase=["Pending", "Running"], selector="app!=x"),
        calls.list_jobs(name="wire-1"),
        calls.get_job(first),
        calls.get_worker("w1"),
        calls.list_projects(),
        calls.read_logs(first, offset=0, follow=False, timeout=1.0),
        calls.watch(revision, kind="Job", worker="w1", timeout=0.2),  # held, then answered empty
        calls.apply([_document("wire-0")], dry_run=True, objects=True),
        calls.ingest_events(events),
        # Refused: 404, 422 (the broker's own and FastAPI's validation), 409 (fenced).
        calls.get_job(10**9),
        calls.get_worker("nobody-here"),
        calls.create_job({"kind": "Job", "spec": {}}),
        calls.append_logs(first, -5, b"x"),
        calls.heartbeat("w1", Heartbeat(instance="someone-else", epoch=10**6)),
        calls.watch(-1, timeout=0.1),
    ]


def _document(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "jobd/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {"command": ["true"], "resources": {"gpus": 64}},
    }


async def test_the_plain_client_gets_what_httpx_gets(jobd: Jobd) -> None:
    async with (
        PlainAsyncClient(jobd.url, _token(jobd)) as plain,
        AsyncClient(jobd.url, _token(jobd)) as wire,
    ):
        listing = await plain.run(calls.list_jobs(limit=1))
        first, revision = listing.items[0]["metadata"]["id"], listing.revision
        refusals = 0
        for call in _same_calls(jobd, first, revision):
            by_plain, by_httpx = await _outcome(plain.run, call), await _outcome(wire.run, call)
            assert by_plain == by_httpx, call.url
            refusals += by_plain[0] == "refused" if isinstance(by_plain, tuple) else 0
        assert refusals == 6


async def test_a_long_poll_and_other_calls_run_at_once_on_their_own_connections(
    jobd: Jobd,
) -> None:
    async with PlainAsyncClient(jobd.url, _token(jobd), max_connections=3) as plain:
        revision = (await plain.run(calls.list_jobs(limit=1))).revision
        pages: list[Any] = []

        async def watch() -> None:
            pages.append(await plain.run(calls.watch(revision, kind="Job", timeout=20.0)))

        async with anyio.create_task_group() as tg:
            tg.start_soon(watch)
            await anyio.sleep(0.2)
            with anyio.fail_after(5):  # far under the watch's hold: not queued behind it
                for _ in range(20):
                    await plain.run(calls.get_worker("w1"))
                created = await plain.run(calls.create_job(_document("wire-beside")))
        created_id = created["metadata"]["id"]
        assert [c.object["metadata"]["id"] for c in pages[0].changes] == [created_id]
        assert len(plain._idle) == 2  # the watch's connection and the others' one, kept


async def test_a_call_held_past_the_read_timeout_is_said_as_httpx_says_it(jobd: Jobd) -> None:
    revision = (await _run_plain(jobd, calls.list_jobs(limit=1))).revision
    held = calls.watch(revision, worker="nobody", timeout=3.0)
    unheld = Call(held.route, held.url, held.parse, params=held.params)  # no hold: 0.5 s read
    said = []
    for client in (
        PlainAsyncClient(jobd.url, _token(jobd), timeout=0.5),
        AsyncClient(jobd.url, _token(jobd), timeout=0.5),
    ):
        async with client:
            with pytest.raises(BrokerUnreachable) as raised:
                await client.run(unheld)
            said.append(raised.value.message)
            assert (await client.run(calls.get_worker("w1")))["metadata"]["name"] == "w1"
    assert said[0] == said[1] == f"the jobd broker at {jobd.url} did not answer in time"


async def test_waiting_too_long_for_a_connection_is_said_as_a_timeout(jobd: Jobd) -> None:
    async with PlainAsyncClient(jobd.url, _token(jobd), timeout=0.5, max_connections=1) as plain:
        revision = (await plain.run(calls.list_jobs(limit=1))).revision
        async with anyio.create_task_group() as tg:
            tg.start_soon(plain.run, calls.watch(revision, worker="nobody", timeout=2.0))
            await anyio.sleep(0.1)
            with pytest.raises(BrokerUnreachable, match="did not answer in time"):
                await plain.run(calls.get_worker("w1"))


async def test_a_broker_not_there_is_said_as_httpx_says_it() -> None:
    closed = f"http://127.0.0.1:{_free_port()}"
    said = []
    for client in (PlainAsyncClient(closed, None), AsyncClient(closed, None)):
        async with client:
            with pytest.raises(BrokerUnreachable) as raised:
                await client.run(calls.list_jobs())
            said.append(raised.value.message)
    assert said[0] == said[1]
    assert "cannot reach the jobd broker" in said[0]


async def test_a_broker_restarted_between_two_calls_is_reached_again(tmp_path: Path) -> None:
    first = start_jobd(tmp_path)
    port = int(first.url.rsplit(":", 1)[1])
    async with PlainAsyncClient(first.url, _token(first)) as plain:
        before = await plain.run(calls.list_workers())
        assert len(plain._idle) == 1
        stop_jobd(first)  # the kept-alive connection is closed by the broker's end
        assert not plain._idle[0].reusable()  # seen closed (well within KEEPALIVE_S)
        again = _launch(tmp_path, port, (), {})
        try:
            assert _ready(again)
            after = await plain.run(calls.list_workers())
            assert [w["metadata"]["name"] for w in after] == [w["metadata"]["name"] for w in before]
            await _store_deleted_refuses_as_httpx_says(again, plain, tmp_path)
        finally:
            stop_jobd(again)


async def _store_deleted_refuses_as_httpx_says(
    jobd: Jobd, plain: PlainAsyncClient, root: Path
) -> None:
    """A 5xx: the broker's store file gone, a submit is refused with 503, worded alike."""
    (root / "data" / "jobd.db").unlink()
    create = calls.create_job(_document("after-the-store"))
    async with AsyncClient(jobd.url, _token(jobd)) as wire:
        by_plain, by_httpx = await _outcome(plain.run, create), await _outcome(wire.run, create)
    assert by_plain == by_httpx
    assert by_plain[:2] == ("refused", 503)


async def _run_plain(jobd: Jobd, call: Call[Any]) -> Any:
    async with PlainAsyncClient(jobd.url, _token(jobd)) as plain:
        return await plain.run(call)
