"""The typed HTTP client of the broker's API for the `job` CLI (and the worker's token look-up).

The worker agent talks to the broker through its own asynchronous client
(`jobd/worker/reporting.py`): it needs concurrent long-polls and retried reports.

Resource documents travel as plain dicts, exactly as the broker sends them, so `job get -o
json` can print them untouched; only the envelopes around them (apply results, pages of
events, watch batches, log chunks) get small typed classes here. Every failure becomes one
of two exceptions with a one-sentence message: `ApiError` when the broker answered with an
error, `BrokerUnreachable` when it could not be reached at all. Next stage: the broker's
routes in `jobd/broker/`.

Configuration follows CONTRACT.md §2 and §8: `default_server()`, `data_dir()` and
`default_token()` give the values a flag would otherwise carry.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Literal
from urllib.parse import urlsplit

import httpx

__all__ = [
    "DEFAULT_SERVER",
    "ApiError",
    "ApplyResult",
    "BlockersResult",
    "BrokerUnreachable",
    "Document",
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

DEFAULT_SERVER = "http://127.0.0.1:8765"
# A held request (follow/watch) may take the server's whole timeout; the socket must outlast it.
_HOLD_MARGIN_S = 10.0
_WATCH_HOLD_S = 30.0
_LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})

Document = dict[str, Any]


# -- configuration ---------------------------------------------------------------------------


def default_server() -> str:
    """`JOBD_URL`, else the broker `jobd dev` starts on this machine."""
    return os.environ.get("JOBD_URL") or DEFAULT_SERVER


def data_dir() -> Path:
    """`JOBD_DATA_DIR`, else `$XDG_DATA_HOME/jobd`, else `~/.local/share/jobd`."""
    explicit = os.environ.get("JOBD_DATA_DIR")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_DATA_HOME")
    if xdg:
        return Path(xdg) / "jobd"
    return Path.home() / ".local" / "share" / "jobd"


def default_token(server: str) -> str | None:
    """`JOBD_TOKEN`, else the local broker's `<data dir>/admin.token`, else None.

    The token file belongs to the broker on this machine, so it is only offered to a server
    on this machine: an admin token must never leak to some other host by default.
    """
    token = os.environ.get("JOBD_TOKEN")
    if token:
        return token
    if not _is_local(server):
        return None
    try:
        return (data_dir() / "admin.token").read_text().strip() or None
    except OSError:
        return None


def _is_local(server: str) -> bool:
    host = (urlsplit(server).hostname or "").lower()
    if host in _LOOPBACK_NAMES or host == socket.gethostname().lower():
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


# -- errors ----------------------------------------------------------------------------------


class ApiError(Exception):
    """The broker refused a request; `message` is its one-sentence reason."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class BrokerUnreachable(ConnectionError):
    """No answer from the broker: refused, unresolvable, timed out or cut off."""

    def __init__(self, server: str, message: str) -> None:
        super().__init__(message)
        self.server = server
        self.message = message


def _error_message(response: httpx.Response) -> str:
    """The body's `detail`, flattened to one sentence whatever shape the server used."""
    try:
        detail = response.json().get("detail")
    except (ValueError, AttributeError):
        detail = None
    if isinstance(detail, str) and detail:
        return detail
    # FastAPI's own validation errors: a list of {loc, msg}; the first one says enough.
    if isinstance(detail, list) and detail and isinstance(detail[0], dict):
        first = detail[0]
        where = ".".join(str(p) for p in first.get("loc", []) if p != "body")
        return f"{where}: {first.get('msg', 'invalid')}" if where else str(first.get("msg"))
    return f"the broker answered {response.status_code} {response.reason_phrase}"


# -- envelopes -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ApplyResult:
    kind: str
    name: str  # "<project>/<name>" for a Job, "<name>" otherwise
    action: Literal["created", "configured", "unchanged"]
    object: Document | None  # None when asked for without objects


@dataclass(frozen=True)
class JobList:
    items: list[Document]
    revision: int


@dataclass(frozen=True)
class WatchChange:
    revision: int
    kind: str
    op: Literal["ADDED", "MODIFIED", "DELETED"]
    object: Document


@dataclass(frozen=True)
class WatchPage:
    revision: int
    changes: list[WatchChange]


@dataclass(frozen=True)
class EventPage:
    items: list[Document]
    last: int | None


@dataclass(frozen=True)
class LogChunk:
    data: bytes
    offset: int  # where the next read starts
    done: bool  # the job is terminal and every byte has been read


@dataclass(frozen=True)
class BlockersResult:
    candidate: int
    worker: str | None
    victims: list[Document]
    dry_run: bool


# -- the client ------------------------------------------------------------------------------


class JobdClient:
    """A synchronous client of one broker; use it as a context manager or call close()."""

    def __init__(
        self,
        server: str | None = None,
        token: str | None = None,
        *,
        timeout: float = 15.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.server = (server or default_server()).rstrip("/")
        if urlsplit(self.server).scheme not in ("http", "https"):
            raise ValueError(f"the broker address {self.server!r} must start with http(s)://")
        headers = {"User-Agent": "jobd-client"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self._http = httpx.Client(
            base_url=self.server, headers=headers, timeout=timeout, transport=transport
        )

    def __enter__(self) -> JobdClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    # -- resources

    def apply(
        self, documents: Sequence[Document], *, dry_run: bool = False, objects: bool = True
    ) -> list[ApplyResult]:
        """Server-side apply; `objects=False` skips sending each object back."""
        body = self._json(
            "POST",
            "/apply",
            json={"documents": list(documents), "dry_run": dry_run},
            params={"objects": str(objects).lower()},
        )
        return [
            ApplyResult(r["kind"], r["name"], r["action"], r.get("object")) for r in body["results"]
        ]

    def create_job(self, document: Document) -> Document:
        return self._doc("POST", "/jobs", json=document)

    def list_jobs(
        self,
        *,
        project: str | None = None,
        phase: Sequence[str] = (),
        worker: str | None = None,
        name: str | None = None,
        limit: int | None = None,
    ) -> JobList:
        params = _params(project=project, phase=list(phase), worker=worker, name=name, limit=limit)
        body = self._json("GET", "/jobs", params=params)
        return JobList(items=body["items"], revision=int(body["revision"]))

    def get_job(self, job_id: int) -> Document:
        return self._doc("GET", f"/jobs/{job_id}")

    def find_job(self, project: str | None, name: str) -> Document | None:
        """The job named `name` in `project` (any project when None), or None.

        A name found in several projects is ambiguous: ApiError asks for PROJECT/NAME.
        """
        items = self.list_jobs(project=project, name=name).items
        if len(items) > 1:
            where = ", ".join(f"{d['metadata']['project']}/{name}" for d in items)
            raise ApiError(409, f"{name!r} names several jobs ({where}); say PROJECT/NAME")
        return items[0] if items else None

    def delete_job(self, job_id: int) -> None:
        self._json("DELETE", f"/jobs/{job_id}")

    def cancel_job(self, job_id: int) -> Document:
        return self._doc("POST", f"/jobs/{job_id}/cancel")

    def preempt_job(self, job_id: int) -> Document:
        return self._doc("POST", f"/jobs/{job_id}/preempt")

    def preempt_blockers(self, job_id: int, *, dry_run: bool = False) -> BlockersResult:
        params = {"dry_run": _flag(dry_run)}
        body = self._json("POST", f"/jobs/{job_id}/preempt-blockers", params=params)
        return BlockersResult(
            candidate=int(body["candidate"]),
            worker=body.get("worker"),
            victims=body.get("victims", []),
            dry_run=bool(body.get("dry_run", dry_run)),
        )

    def resume_job(self, job_id: int) -> Document:
        return self._doc("POST", f"/jobs/{job_id}/resume")

    def list_workers(self) -> list[Document]:
        items: list[Document] = self._json("GET", "/workers")["items"]
        return items

    def list_projects(self) -> list[Document]:
        items: list[Document] = self._json("GET", "/projects")["items"]
        return items

    # -- streams

    def read_logs(
        self, job_id: int, *, offset: int = 0, follow: bool = False, timeout: float = 30.0
    ) -> LogChunk:
        params = _params(offset=offset, follow=_flag(follow), timeout=timeout if follow else None)
        response = self._send("GET", f"/jobs/{job_id}/logs", params=params, hold=follow, t=timeout)
        return LogChunk(
            data=response.content,
            offset=int(response.headers.get("X-Jobd-Offset", offset + len(response.content))),
            done=response.headers.get("X-Jobd-Done", "false").lower() == "true",
        )

    def events(
        self,
        *,
        job: int | None = None,
        event_type: str | None = None,
        after: int | None = None,
        follow: bool = False,
        timeout: float = 30.0,
    ) -> EventPage:
        params = _params(
            job=job,
            type=event_type,
            after=after,
            follow=_flag(follow),
            timeout=timeout if follow else None,
        )
        body = self._json("GET", "/events", params=params, hold=follow, t=timeout)
        return EventPage(items=body["items"], last=body.get("last"))

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
        params = {"since": since, "kind": kind, "timeout": timeout}
        body = self._json("GET", "/watch", params=params, hold=True, t=timeout)
        changes = [
            WatchChange(int(c["revision"]), c["kind"], c["op"], c["object"])
            for c in body["changes"]
        ]
        return WatchPage(revision=int(body["revision"]), changes=changes)

    def job_changes(
        self,
        *,
        project: str | None = None,
        name: str | None = None,
        phases: Sequence[str] = (),
        known: Sequence[Document] = (),
        deadline: float | None = None,
    ) -> Iterator[tuple[str, Document]]:
        """(op, job) for each matching job as listed now, then for each change after.

        List, then watch from the list's revision, the way an informer does. A 410 means the
        broker no longer keeps our revision: list again and report only the jobs whose
        resource_version moved, so nothing is missed and nothing is said twice. `known`
        are jobs the caller has already shown; `deadline` (time.monotonic()) ends the
        stream quietly.
        """
        versions = {_job_id(j): _version(j) for j in known}
        while True:
            listing = self.list_jobs(project=project, name=name, phase=phases)
            for job in listing.items:
                if versions.get(_job_id(job), -1) != _version(job):
                    op = "MODIFIED" if _job_id(job) in versions else "ADDED"
                    versions[_job_id(job)] = _version(job)
                    yield op, job
            revision = listing.revision
            while (hold := _hold(deadline)) > 0:
                try:
                    page = self.watch(revision, kind="Job", timeout=hold)
                except ApiError as exc:
                    if exc.status != 410:
                        raise
                    break
                for change in page.changes:
                    job = change.object
                    if not _matches(job, project, name, phases):
                        continue
                    if change.op == "DELETED":
                        versions.pop(_job_id(job), None)
                    elif versions.get(_job_id(job), -1) == _version(job):
                        continue
                    else:
                        versions[_job_id(job)] = _version(job)
                    yield change.op, job
                revision = page.revision
            else:  # the deadline passed (a 410 leaves by `break`, to list again)
                return

    # -- plumbing

    def _doc(self, method: str, path: str, **kwargs: Any) -> Document:
        body: Document = self._json(method, path, **kwargs)
        return body

    def _json(
        self, method: str, path: str, *, hold: bool = False, t: float = 0.0, **kwargs: Any
    ) -> Any:
        return self._send(method, path, hold=hold, t=t, **kwargs).json()

    def _send(
        self, method: str, path: str, *, hold: bool = False, t: float = 0.0, **kwargs: Any
    ) -> httpx.Response:
        if hold:
            kwargs["timeout"] = t + _HOLD_MARGIN_S
        try:
            response = self._http.request(method, path, **kwargs)
        except (httpx.ConnectError, httpx.ConnectTimeout, httpx.UnsupportedProtocol):
            raise BrokerUnreachable(
                self.server,
                f"cannot reach the jobd broker at {self.server} (is `jobd dev` running?)",
            ) from None
        except httpx.TimeoutException:
            raise BrokerUnreachable(
                self.server, f"the jobd broker at {self.server} did not answer in time"
            ) from None
        except httpx.TransportError as exc:
            raise BrokerUnreachable(
                self.server, f"lost the connection to the jobd broker at {self.server} ({exc})"
            ) from None
        if response.is_error:
            raise ApiError(response.status_code, _error_message(response))
        return response


def _job_id(job: Document) -> Any:
    return (job.get("metadata") or {}).get("id")


def _version(job: Document) -> Any:
    return (job.get("metadata") or {}).get("resource_version")


def _matches(job: Document, project: str | None, name: str | None, phases: Sequence[str]) -> bool:
    meta = job.get("metadata") or {}
    if project is not None and (meta.get("project") or "default") != project:
        return False
    if name is not None and meta.get("name") != name:
        return False
    return not phases or (job.get("status") or {}).get("phase") in phases


def _hold(deadline: float | None) -> float:
    """How long the next watch may be held: the usual 30 s, or what is left until deadline."""
    if deadline is None:
        return _WATCH_HOLD_S
    return min(_WATCH_HOLD_S, deadline - time.monotonic())


def _flag(value: bool) -> str:
    return "true" if value else "false"


def _params(**values: Any) -> Mapping[str, Any]:
    """Query parameters without the ones not said (None or an empty list)."""
    return {k: v for k, v in values.items() if v is not None and v != []}
