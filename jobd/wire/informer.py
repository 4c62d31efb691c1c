"""One list-then-watch of jobs (client-go's Reflector), for the CLI, the agent and the bench.

List the jobs a `JobFilter` selects, then long-poll the watch from the list's revision
and pass on each change in order. The broker filters: the same filter goes to the list
and to the watch as their query parameters, so a client never re-implements it. A 410
Gone (the broker's change feed no longer reaches back to our revision) means list again
and watch from there. So does any other error, after a backoff, for a caller that rides
errors out (the agent, the bench); the CLI's informer raises them instead.

A list passes on the jobs whose resource_version moved since they were last passed on
(all of them with `every_listed`, a resync), so a relist misses nothing and says nothing
twice. `Reflector` holds all of this but the I/O: the call to send next and what its
answer means. `Informer` sends its calls with the sync `Client` and is an iterator;
`AsyncInformer` sends them with an async client (the agent's plain one, or httpx's) and
hands each change to a handler.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

import anyio

from jobd.api.vocabulary import TERMINAL_PHASES
from jobd.wire import calls
from jobd.wire.answers import Document, JobList, WatchPage
from jobd.wire.calls import Call
from jobd.wire.errors import ApiError, BrokerUnreachable

if TYPE_CHECKING:  # the agent sends with its plain client and never loads httpx
    from jobd.wire.client import Client
    from jobd.wire.failover import FailoverClient
    from jobd.wire.plain_async import AsyncSender

__all__ = [
    "AsyncInformer",
    "Backoff",
    "Delta",
    "Informer",
    "JobFilter",
    "OnError",
    "Reflector",
]

WATCH_HOLD_S = 30.0
_UNSEEN = object()  # the version of a job never passed on

# Told of each error the informer rides out (it then backs off and lists again).
OnError = Callable[[ApiError | BrokerUnreachable], None]


@dataclass(frozen=True, slots=True)
class JobFilter:
    """Which jobs to follow, as the query parameters of both the list and the watch."""

    project: str | None = None
    name: str | None = None
    phases: Sequence[str] = ()
    selector: str | None = None
    worker: str | None = None
    # The watch leaves out the changes the worker's own reports make (the agent's watch:
    # `skip_own_reports` of GET /watch); the list shows every job.
    skip_own_reports: bool = False

    def list_call(self) -> Call[JobList]:
        return calls.list_jobs(
            project=self.project,
            name=self.name,
            phase=self.phases,
            selector=self.selector,
            worker=self.worker,
        )

    def watch_call(self, since: int, hold: float) -> Call[WatchPage]:
        return calls.watch(
            since,
            kind="Job",
            project=self.project,
            name=self.name,
            phase=self.phases,
            selector=self.selector,
            worker=self.worker,
            timeout=hold,
            skip_own_reports=self.skip_own_reports,
        )


class Delta(NamedTuple):
    """One change passed on: ADDED, MODIFIED or DELETED, and the job as it now is."""

    op: str
    object: Document


@dataclass
class Backoff:
    """Seconds to wait after each failure in a row: doubling from `first_s` up to `cap_s`."""

    first_s: float = 0.5
    cap_s: float = 2.0
    _next_s: float | None = None

    def next(self) -> float:
        delay = self.first_s if self._next_s is None else self._next_s
        self._next_s = min(delay * 2, self.cap_s)
        return delay

    def reset(self) -> None:
        self._next_s = None


@dataclass
class Reflector:
    """What a list-then-watch knows between two requests; no I/O.

    `revision` is where the next watch starts; None until listed, and again after a 410 or
    an error, when the next call is a list. `on_error` None: errors other than 410 raise.
    """

    jobs: JobFilter
    every_listed: bool = False
    on_error: OnError | None = None
    backoff: Backoff = field(default_factory=Backoff)
    revision: int | None = None
    _versions: dict[Any, Any] = field(default_factory=dict)

    def know(self, known: Sequence[Document]) -> None:
        """Jobs already shown: a list passes them on only once they have moved."""
        self._versions.update((_job_id(j), _version(j)) for j in known)

    @property
    def must_list(self) -> bool:
        return self.revision is None

    def listed(self, listing: JobList) -> list[Delta]:
        self.revision = listing.revision
        self.backoff.reset()
        moved = []
        for job in listing.items:
            key, version = _job_id(job), _version(job)
            if self.every_listed or self._versions.get(key, _UNSEEN) != version:
                moved.append(Delta("MODIFIED" if key in self._versions else "ADDED", job))
                self._remember(key, job, version)
        return moved

    def watched(self, page: WatchPage) -> list[Delta]:
        self.revision = page.revision
        self.backoff.reset()
        passed = []
        for change in page.changes:
            job = change.object
            key, version = _job_id(job), _version(job)
            if change.op == "DELETED":
                self._versions.pop(key, None)
            elif self._versions.get(key, _UNSEEN) == version:
                continue  # passed on already (a list showed it)
            else:
                self._remember(key, job, version)
            passed.append(Delta(change.op, job))
        return passed

    def _remember(self, key: Any, job: Document, version: Any) -> None:
        """Note the version passed on. A reflector that passes every listed job again (the
        agent's) forgets a job once it has ended: what it holds is the size of what runs
        here, not of every job the worker ever ran until retention deletes them."""
        if self.every_listed and (job.get("status") or {}).get("phase") in TERMINAL_PHASES:
            self._versions.pop(key, None)
        else:
            self._versions[key] = version

    def failed(self, exc: ApiError | BrokerUnreachable) -> float:
        """List again after `exc`, in the seconds returned; raises what is not to be ridden out."""
        self.revision = None
        if isinstance(exc, ApiError) and exc.status == 410:
            return 0.0  # behind the broker's change feed: list at once
        if self.on_error is None:
            raise exc
        self.on_error(exc)
        return self.backoff.next()


def _hold_until(deadline: float | None) -> float:
    """How long the next watch may be held: the usual 30 s, or what is left until `deadline`
    (time.monotonic())."""
    if deadline is None:
        return WATCH_HOLD_S
    return min(WATCH_HOLD_S, deadline - time.monotonic())


class Informer:
    """The CLI's list-then-watch: iterate for each change, in order; it ends at `deadline`
    (time.monotonic()), after the first list however late."""

    def __init__(
        self,
        client: Client | FailoverClient,
        jobs: JobFilter,
        *,
        known: Sequence[Document] = (),
        deadline: float | None = None,
        on_error: OnError | None = None,
        backoff: Backoff | None = None,
    ) -> None:
        self.client, self.deadline = client, deadline
        self.reflector = Reflector(jobs, on_error=on_error, backoff=backoff or Backoff())
        self.reflector.know(known)

    def __iter__(self) -> Iterator[Delta]:
        while True:
            hold = _hold_until(self.deadline)
            if hold <= 0 and not self.reflector.must_list:
                return
            try:
                deltas = self._next(hold)
            except (ApiError, BrokerUnreachable) as exc:
                time.sleep(self.reflector.failed(exc))
                continue
            yield from deltas

    def _next(self, hold: float) -> list[Delta]:
        """One request: the list, or the next watch."""
        reflector = self.reflector
        if reflector.revision is None:
            return reflector.listed(self.client.run(reflector.jobs.list_call()))
        return reflector.watched(
            self.client.run(reflector.jobs.watch_call(reflector.revision, hold))
        )


class AsyncInformer:
    """The agent's and the bench's list-then-watch: `run(handle)` hands each change to
    `handle`, in order, until cancelled; `synced` is set once the first list is handled."""

    def __init__(
        self,
        client: AsyncSender,
        jobs: JobFilter,
        *,
        every_listed: bool = False,
        on_error: OnError | None = None,
        backoff: Backoff | None = None,
    ) -> None:
        self.client = client
        self.reflector = Reflector(
            jobs, every_listed=every_listed, on_error=on_error, backoff=backoff or Backoff()
        )
        self.synced = anyio.Event()

    async def run(self, handle: Callable[[Delta], object]) -> None:
        while True:
            listing = self.reflector.must_list
            try:
                deltas = await self._next()
            except (ApiError, BrokerUnreachable) as exc:
                await anyio.sleep(self.reflector.failed(exc))
                continue
            for delta in deltas:
                handle(delta)
            if listing:
                self.synced.set()

    async def _next(self) -> list[Delta]:
        """One request: the list, or the next watch."""
        reflector = self.reflector
        if reflector.revision is None:
            return reflector.listed(await self.client.run(reflector.jobs.list_call()))
        call = reflector.jobs.watch_call(reflector.revision, WATCH_HOLD_S)
        return reflector.watched(await self.client.run(call))


def _job_id(job: Document) -> Any:
    return (job.get("metadata") or {}).get("id")


def _version(job: Document) -> Any:
    return (job.get("metadata") or {}).get("resource_version")
