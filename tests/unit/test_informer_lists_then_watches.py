"""The wire's one informer (jobd/wire/informer.py) against a scripted broker
(httpx.MockTransport): it lists, watches from the list's revision and then from each
page's, lists again after a 410 and after an error it rides out (backing off), and sends
its filter to both the list and the watch, so the broker does the filtering."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import anyio
import httpx
import pytest

from jobd.wire.answers import JobList, WatchChange, WatchPage
from jobd.wire.client import ApiError, AsyncClient, BrokerUnreachable, Client
from jobd.wire.informer import AsyncInformer, Backoff, Delta, Informer, JobFilter, Reflector

Answer = dict[str, Any] | int | type[httpx.TransportError]


def job(id_: int, rv: int, phase: str = "Running") -> dict[str, Any]:
    meta = {"id": id_, "name": f"j{id_}", "project": "p", "resource_version": rv}
    return {"kind": "Job", "metadata": meta, "spec": {"command": ["x"]}, "status": {"phase": phase}}


def page(revision: int, *changes: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    items = [{"revision": revision, "kind": "Job", "op": op, "object": o} for op, o in changes]
    return {"revision": revision, "changes": items}


class Scripted:
    """Answers each request with the next scripted answer: a body, a status, or a failure."""

    def __init__(self, *answers: Answer) -> None:
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if not self.answers:
            raise httpx.ConnectError("the script is over", request=request)
        answer = self.answers.pop(0)
        if isinstance(answer, int):
            return httpx.Response(answer, json={"detail": f"status {answer}"})
        if isinstance(answer, type):
            raise answer("scripted failure", request=request)
        return httpx.Response(200, json=answer)

    def asked(self) -> list[tuple[str, str | None]]:
        """(path, since) of each request made."""
        return [(r.url.path, r.url.params.get("since")) for r in self.requests]


def sync_client(broker: Scripted) -> Client:
    return Client("http://broker", None, transport=httpx.MockTransport(broker))


def take(deltas: Any, n: int) -> list[tuple[str, int, int]]:
    out = []
    for op, obj in deltas:
        out.append((op, obj["metadata"]["id"], obj["metadata"]["resource_version"]))
        if len(out) == n:
            break
    return out


def test_it_watches_from_the_lists_revision_then_from_each_pages() -> None:
    broker = Scripted(
        {"items": [job(1, 1)], "revision": 3},
        page(5, ("MODIFIED", job(1, 5))),
        page(7, ("ADDED", job(2, 7))),
    )
    informer = Informer(sync_client(broker), JobFilter())

    assert take(informer, 3) == [("ADDED", 1, 1), ("MODIFIED", 1, 5), ("ADDED", 2, 7)]
    assert broker.asked() == [("/jobs", None), ("/watch", "3"), ("/watch", "5")]


def test_after_a_410_it_lists_again_and_passes_on_only_what_moved() -> None:
    broker = Scripted(
        {"items": [job(1, 1), job(2, 2)], "revision": 3},
        410,
        {"items": [job(1, 1), job(2, 6), job(3, 8)], "revision": 9},
        page(10, ("DELETED", job(3, 10))),
    )
    informer = Informer(sync_client(broker), JobFilter())

    assert take(informer, 5) == [
        ("ADDED", 1, 1),
        ("ADDED", 2, 2),
        ("MODIFIED", 2, 6),  # job 1 did not move: not said twice
        ("ADDED", 3, 8),
        ("DELETED", 3, 10),
    ]
    assert broker.asked() == [("/jobs", None), ("/watch", "3"), ("/jobs", None), ("/watch", "9")]


def test_the_filter_goes_to_the_list_and_to_the_watch() -> None:
    broker = Scripted({"items": [], "revision": 1}, page(2, ("ADDED", job(1, 2))))
    jobs = JobFilter(project="p", name="n", phases=("Pending", "Running"), selector="team=v")

    assert take(Informer(sync_client(broker), jobs), 1) == [("ADDED", 1, 2)]

    listed, watched = broker.requests
    for request in (listed, watched):
        params = request.url.params
        assert params["project"] == "p" and params["name"] == "n"
        assert params.get_list("phase") == ["Pending", "Running"]
        assert params["selector"] == "team=v"
    assert watched.url.params["kind"] == "Job"


def test_the_clis_informer_raises_what_is_not_a_410() -> None:
    broker = Scripted({"items": [], "revision": 1}, 403)

    with pytest.raises(ApiError) as caught:
        take(Informer(sync_client(broker), JobFilter()), 1)

    assert caught.value.status == 403


def test_an_error_ridden_out_is_told_then_backs_off_and_lists_again() -> None:
    told: list[str] = []
    slept: list[float] = []
    broker = Scripted(
        {"items": [job(1, 1)], "revision": 3},
        httpx.ConnectError,
        500,
        {"items": [job(1, 4)], "revision": 6},
        page(7, ("MODIFIED", job(1, 7))),
    )
    informer = Informer(
        sync_client(broker),
        JobFilter(),
        on_error=lambda exc: told.append(type(exc).__name__),
        backoff=Recording(slept),
    )

    assert take(informer, 3) == [("ADDED", 1, 1), ("MODIFIED", 1, 4), ("MODIFIED", 1, 7)]
    assert told == ["BrokerUnreachable", "ApiError"]
    assert slept == [0.5, 1.0]  # doubling while the failures last (not slept for real)
    assert broker.asked() == [
        ("/jobs", None),
        ("/watch", "3"),
        ("/jobs", None),  # after the unreachable broker: list again, not watch from 3
        ("/jobs", None),
        ("/watch", "6"),
    ]


class Recording(Backoff):
    """A backoff that records the delays it would have asked for and asks for none."""

    def __init__(self, delays: list[float]) -> None:
        super().__init__()
        self.delays = delays

    def next(self) -> float:
        self.delays.append(super().next())
        return 0.0


def test_the_backoff_doubles_to_its_cap_and_starts_again_after_an_answer() -> None:
    reflector = Reflector(JobFilter(), on_error=lambda exc: None)
    down = BrokerUnreachable("http://broker", "down")

    delays = [reflector.failed(down) for _ in range(4)]
    reflector.listed(JobList(items=[], revision=5))
    again = reflector.failed(down)

    assert delays == [0.5, 1.0, 2.0, 2.0]
    assert again == 0.5
    assert reflector.failed(ApiError(410, "compacted")) == 0.0  # a 410 lists at once


@pytest.mark.anyio
async def test_the_async_informer_hands_each_change_over_and_says_when_synced() -> None:
    broker = Scripted(
        {"items": [job(1, 1)], "revision": 2},
        410,
        {"items": [job(1, 1)], "revision": 4},
        page(5, ("MODIFIED", job(1, 5))),
    )

    async def held_when_over(request: httpx.Request) -> httpx.Response:
        if not broker.answers:  # as a watch with nothing to say: held until cancelled
            await anyio.sleep_forever()
        return broker(request)

    client = AsyncClient("http://broker", None, transport=httpx.MockTransport(held_when_over))
    seen: list[Delta] = []
    informer = AsyncInformer(client, JobFilter(worker="w1"), every_listed=True)

    async with anyio.create_task_group() as tg:
        tg.start_soon(informer.run, seen.append)
        await informer.synced.wait()
        with anyio.fail_after(5):
            while len(seen) < 3:
                await anyio.sleep(0.01)
        tg.cancel_scope.cancel()

    # every_listed: a relist hands over every job bound there, moved or not (a resync).
    assert [(d.op, d.object["metadata"]["resource_version"]) for d in seen] == [
        ("ADDED", 1),
        ("MODIFIED", 1),
        ("MODIFIED", 5),
    ]
    assert all(r.url.params["worker"] == "w1" for r in broker.requests)


def test_the_agents_reflector_forgets_each_job_once_it_has_ended() -> None:
    """Its memory is the size of what runs there, not of every job the worker ran (until
    retention deletes them); the CLI's keeps ended jobs, so a relist shows them once."""
    for every_listed, kept in ((True, [2]), (False, [1, 2])):
        reflector = Reflector(JobFilter(worker="w1"), every_listed=every_listed)
        reflector.listed(JobList([job(1, 1), job(2, 1)], 2))
        moved = (job(1, 3, "Succeeded"), job(2, 3))
        changes = [WatchChange(3, "Job", "MODIFIED", j) for j in moved]
        passed = reflector.watched(WatchPage(3, changes))
        assert [d.object["status"]["phase"] for d in passed] == ["Succeeded", "Running"]
        assert sorted(reflector._versions) == kept


def test_job_get_without_a_watch_does_not_load_the_informer() -> None:
    """`job get` starts fast: the informer loads only where jobs are followed."""
    probe = (
        "import json, sys\n"
        "from jobd.cli.job_main import main\n"
        "sys.argv = ['job', '--server', 'http://127.0.0.1:9', 'get']\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True).stdout
    loaded = set(json.loads(out.splitlines()[-1]))

    assert "jobd.cli.broker_client" in loaded and "jobd.wire.informer" not in loaded
