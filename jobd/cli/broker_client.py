"""The `job` CLI's client of the broker (and the worker's token look-up).

`JobdClient` is the synchronous client of `jobd.wire` with a method per operation the
CLI uses, over every broker the server names (several, comma-separated: the wire's
`FailoverClient` asks the next when one is down and follows a standby's 307); `job get
-w` and `job wait` follow jobs through the wire's informer (`job_changes`). It sends each
call through the standard library's HTTP client to an http:// broker (`plain_http.py`:
httpx is not even imported), and through the wire's httpx `Client` to an https:// one,
through a proxy, or over a transport a test hands in. The requests, the envelopes of the
answers and the two exceptions (`ApiError`, `BrokerUnreachable`) are the wire's,
re-exported here for the CLI. Next stage: the broker's routes in `jobd/broker/`.

Configuration follows CONTRACT.md §2 and §8: `default_server()`, `data_dir()` and
`default_token()` (from `jobd.discovery`, which needs no httpx) give the values a flag
would otherwise carry.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Protocol, TypeVar, cast

from jobd.api.vocabulary import DEFAULT_PROJECT
from jobd.discovery import DEFAULT_SERVER, data_dir, default_server, default_token
from jobd.wire import calls
from jobd.wire.answers import (
    ApplyResult,
    BlockersResult,
    Document,
    DrainResult,
    EventPage,
    JobList,
    LogChunk,
    WatchChange,
    WatchPage,
)
from jobd.wire.calls import Call
from jobd.wire.closing import Closing
from jobd.wire.errors import ApiError, BrokerUnreachable

if TYPE_CHECKING:
    import httpx

    from jobd.wire.client import Client

__all__ = [
    "DEFAULT_SERVER",
    "ApiError",
    "ApplyResult",
    "BlockersResult",
    "BrokerUnreachable",
    "Document",
    "DrainResult",
    "EventPage",
    "JobList",
    "JobdClient",
    "LogChunk",
    "WatchChange",
    "WatchPage",
    "data_dir",
    "default_server",
    "default_token",
]


# -- the client ------------------------------------------------------------------------------


T = TypeVar("T")


class _Sender(Protocol):
    server: str

    def run(self, call: Call[T]) -> T: ...

    def close(self) -> None: ...


def _sender(
    server: str,
    token: str | None,
    timeout: float,
    transport: httpx.BaseTransport | None,
    connect_timeout: float,
) -> _Sender:
    from jobd.cli.plain_http import PlainClient, plain_http_serves

    local = server.startswith("unix:")  # a Unix socket: the standard library's too
    if transport is None and (local or plain_http_serves(server)):
        return PlainClient(server, token, timeout=timeout, connect_timeout=connect_timeout)
    import httpx

    from jobd.wire.client import Client

    timeouts = httpx.Timeout(timeout, connect=connect_timeout)
    return Client(server, token, timeout=timeouts, transport=transport)


class JobdClient(Closing):
    """A synchronous client of the brokers `server` names (one, or several comma-separated
    to fail over between); use it as a context manager or call close()."""

    def __init__(
        self,
        server: str | None = None,
        token: str | None = None,
        *,
        timeout: float = 15.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        from jobd.wire.failover import FailoverClient, connect_timeout

        servers = server or default_server()
        opening = connect_timeout(servers, timeout)

        def connect(url: str) -> _Sender:
            return _sender(url, token, timeout, transport, opening)

        self._sender = FailoverClient(servers, connect)

    @property
    def server(self) -> str:
        """The broker asked first: the one that answered last."""
        return self._sender.server

    def run(self, call: Call[T]) -> T:
        """Send the call; its answer's value, or ApiError / BrokerUnreachable."""
        return self._sender.run(call)

    def close(self) -> None:
        self._sender.close()

    # -- resources

    def apply(
        self, documents: Sequence[Document], *, dry_run: bool = False, objects: bool = True
    ) -> list[ApplyResult]:
        """Server-side apply; `objects=False` skips sending each object back."""
        return self.run(calls.apply(documents, dry_run=dry_run, objects=objects))

    def create_job(self, document: Document) -> Document:
        return self.run(calls.create_job(document))

    def list_jobs(
        self,
        *,
        project: str | None = None,
        phase: Sequence[str] = (),
        worker: str | None = None,
        name: str | None = None,
        selector: str | None = None,
        limit: int | None = None,
    ) -> JobList:
        call = calls.list_jobs(
            project=project, phase=phase, worker=worker, name=name, selector=selector, limit=limit
        )
        return self.run(call)

    def get_job(self, job_id: int) -> Document:
        return self.run(calls.get_job(job_id))

    def find_job(self, project: str | None, name: str) -> Document | None:
        """The job named `name` in `project` (any project when None), or None.

        A name found in several projects means the default project's job, as a bare name
        means the default namespace to kubectl (and `job apply` prints a job of the default
        project as `job/NAME`); without one there, ApiError asks for PROJECT/NAME.
        """
        items = self.list_jobs(project=project, name=name).items
        if len(items) > 1:
            default = [d for d in items if d["metadata"].get("project") == DEFAULT_PROJECT]
            if default:
                return default[0]
            where = ", ".join(f"{d['metadata']['project']}/{name}" for d in items)
            raise ApiError(409, f"{name!r} names several jobs ({where}); say PROJECT/NAME")
        return items[0] if items else None

    def delete_job(self, job_id: int) -> None:
        self.run(calls.delete_job(job_id))

    def cancel_job(self, job_id: int) -> Document:
        return self.run(calls.cancel_job(job_id))

    def preempt_job(self, job_id: int) -> Document:
        return self.run(calls.preempt_job(job_id))

    def explain_job(self, job_id: int) -> Document:
        return self.run(calls.explain_job(job_id))

    def preempt_blockers(self, job_id: int, *, dry_run: bool = False) -> BlockersResult:
        return self.run(calls.preempt_blockers(job_id, dry_run=dry_run))

    def resume_job(
        self, job_id: int, *, from_scratch: bool = False, force: bool = False
    ) -> Document:
        return self.run(calls.resume_job(job_id, from_scratch=from_scratch, force=force))

    def create_array(self, document: Document) -> Document:
        return self.run(calls.create_array(document))

    def get_array(self, array_id: int) -> Document:
        return self.run(calls.get_array(array_id))

    def list_arrays(self, *, project: str | None = None, name: str | None = None) -> list[Document]:
        return self.run(calls.list_arrays(project=project, name=name))

    def find_array(self, project: str | None, name: str) -> Document | None:
        """The array named `name` in `project` (any project when None; the default
        project's when several have one), or None."""
        items = self.list_arrays(project=project, name=name)
        if len(items) > 1:
            default = [d for d in items if d["metadata"].get("project") == DEFAULT_PROJECT]
            if default:
                return default[0]
            where = ", ".join(f"{d['metadata']['project']}/{name}" for d in items)
            raise ApiError(409, f"{name!r} names several arrays ({where}); say PROJECT/NAME")
        return items[0] if items else None

    def cancel_array(self, array_id: int) -> Document:
        """Cancel the members that have not ended; the array, with `cancelled` (ids)."""
        return self.run(calls.cancel_array(array_id))

    def delete_array(self, array_id: int) -> Document:
        return self.run(calls.delete_array(array_id))

    def list_workers(self) -> list[Document]:
        return self.run(calls.list_workers())

    def login_code(self) -> Document:
        """`{code, path, expires_in_s}`: the dashboard's one-time login (`job ui`)."""
        return self.run(calls.login_code())

    def list_projects(self) -> list[Document]:
        return self.run(calls.list_projects())

    def get_project(self, name: str) -> Document:
        return self.run(calls.get_project(name))

    def usage(self) -> Document:
        return self.run(calls.usage())

    def get_worker(self, name: str) -> Document:
        return self.run(calls.get_worker(name))

    def cordon_worker(self, name: str) -> Document:
        return self.run(calls.cordon_worker(name))

    def uncordon_worker(self, name: str) -> Document:
        return self.run(calls.uncordon_worker(name))

    def drain_worker(self, name: str, *, preempt: bool = False) -> DrainResult:
        return self.run(calls.drain_worker(name, preempt=preempt))

    # -- streams

    def read_logs(
        self,
        job_id: int,
        *,
        offset: int = 0,
        follow: bool = False,
        timeout: float = 30.0,
        tail: int | None = None,
        since_s: float | None = None,
        rank: int | None = None,
    ) -> LogChunk:
        call = calls.read_logs(
            job_id,
            offset=offset,
            follow=follow,
            timeout=timeout,
            tail=tail,
            since_s=since_s,
            rank=rank,
        )
        return self.run(call)

    def events(
        self,
        *,
        job: int | None = None,
        event_type: str | None = None,
        after: int | None = None,
        from_now: bool = False,
        follow: bool = False,
        timeout: float = 30.0,
    ) -> EventPage:
        call = calls.list_events(
            job=job,
            event_type=event_type,
            after=after,
            from_now=from_now,
            follow=follow,
            timeout=timeout,
        )
        return self.run(call)

    def iter_events(
        self, *, job: int | None = None, event_type: str | None = None
    ) -> Iterator[Document]:
        """Every stored event, page after page, without waiting for new ones."""
        after: int | None = None
        while True:
            page = self.events(job=job, event_type=event_type, after=after)
            yield from page.items
            # A page that moves nothing forward is the end, whatever `last` says.
            if not page.items or page.last is None or page.last == after:
                return
            after = page.last

    def watch(self, since: int, *, kind: str = "Job", timeout: float = 30.0) -> WatchPage:
        """Changes after revision `since`; ApiError 410 means list again and restart."""
        return self.run(calls.watch(since, kind=kind, timeout=timeout))

    def job_changes(
        self,
        *,
        project: str | None = None,
        name: str | None = None,
        phases: Sequence[str] = (),
        selector: str | None = None,
        known: Sequence[Document] = (),
        deadline: float | None = None,
    ) -> Iterator[tuple[str, Document]]:
        """(op, job) for each matching job as listed now, then for each change after: the
        wire's informer (list, watch from the list's revision, list again after a 410),
        the broker filtering both. `known` are jobs the caller has already shown;
        `deadline` (time.monotonic()) ends the stream quietly.
        """
        # Loaded here: only `get -w` and `wait` follow jobs, and `job get` starts without it.
        from jobd.wire.informer import Informer, JobFilter

        jobs = JobFilter(project=project, name=name, phases=tuple(phases), selector=selector)
        sender = cast("Client", self)  # the informer only calls run()
        return iter(Informer(sender, jobs, known=known, deadline=deadline))
