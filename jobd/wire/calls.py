"""Each operation of the broker's API as a `Call`: the request to send and how to read
the answer, without any I/O.

A `Call` is data, like an `httpx.Request`: the sync client (the CLI's) and the async
client (the worker's) both send it with `run()`, and the worker sends the same one again
until the broker answers. Next stage: `client.py` sends calls and maps failures to errors.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from jobd.api.frozen import Frozen
from jobd.wire import routes
from jobd.wire.answers import (
    ApplyResult,
    BlockersResult,
    Document,
    DrainResult,
    EventPage,
    HeartbeatAnswer,
    JobList,
    LogChunk,
    Registered,
    ReportResult,
    WatchChange,
    WatchPage,
)
from jobd.wire.routes import Route

if TYPE_CHECKING:  # the CLI's calls need neither; the models load when a body is made
    import httpx
    from pydantic import BaseModel

    from jobd.wire.models import (
        Heartbeat,
        Registration,
        ReportBatch,
        TokenCreated,
        TokenInfo,
        TokenRequest,
        WorkerEvents,
    )

__all__ = [
    "Call",
    "append_logs",
    "apply",
    "cancel_array",
    "cancel_job",
    "cordon_worker",
    "create_array",
    "create_job",
    "create_token",
    "delete_array",
    "delete_job",
    "drain_worker",
    "explain_job",
    "get_array",
    "get_job",
    "get_project",
    "get_worker",
    "heartbeat",
    "ingest_events",
    "list_arrays",
    "list_events",
    "list_jobs",
    "list_projects",
    "list_tokens",
    "list_workers",
    "login_code",
    "preempt_blockers",
    "preempt_job",
    "read_logs",
    "register_worker",
    "resume_job",
    "revoke_token",
    "send_reports",
    "uncordon_worker",
    "usage",
    "watch",
    "whoami",
]

T = TypeVar("T")
# A body of one of the wire's models as a plain JSON object (its fields, as said).
Body = Mapping[str, Any]
_JSON_TYPE = {"Content-Type": "application/json"}


class Call(Frozen, Generic[T]):
    """One request of `route` and how to read its answer; sent as often as needed."""

    route: Route
    url: str
    parse: Callable[[httpx.Response], T]
    params: Mapping[str, Any] | None
    json: Any  # a plain JSON value (a user's document goes as the user wrote it)
    content: bytes | None  # or the body's bytes, already encoded
    headers: Mapping[str, str]
    hold: float | None  # seconds the broker may hold it before answering

    def __init__(
        self,
        route: Route,
        url: str,
        parse: Callable[[httpx.Response], T],
        params: Mapping[str, Any] | None = None,
        json: Any = None,
        content: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        hold: float | None = None,
    ) -> None:
        self._set(
            route=route,
            url=url,
            parse=parse,
            params=params,
            json=json,
            content=content,
            headers={} if headers is None else headers,
            hold=hold,
        )

    @property
    def method(self) -> str:
        return self.route.method


def _model_call(
    route: Route, url: str, body: BaseModel | Body, parse: Callable[[httpx.Response], T]
) -> Call[T]:
    """A call whose body is one of the wire's models, as its fields were said, or a plain
    dict of that model's fields (the agent's, which loads no pydantic: the broker validates
    what it receives)."""
    if isinstance(body, Mapping):
        encoded = json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        content = encoded.encode()
    else:
        content = body.model_dump_json(exclude_unset=True).encode()
    return Call(route, url, parse, content=content, headers=_JSON_TYPE)


# -- reading answers


def _json(response: httpx.Response) -> Any:
    return response.json()


def _document(response: httpx.Response) -> Document:
    body: Document = response.json()
    return body


def _items(response: httpx.Response) -> list[Document]:
    items: list[Document] = response.json()["items"]
    return items


def _job_list(response: httpx.Response) -> JobList:
    body = response.json()
    return JobList(items=body["items"], revision=int(body["revision"]))


def _apply_results(response: httpx.Response) -> list[ApplyResult]:
    return [
        ApplyResult(r["kind"], r["name"], r["action"], r.get("object"))
        for r in response.json()["results"]
    ]


def _watch_page(response: httpx.Response) -> WatchPage:
    body = response.json()
    changes = [
        WatchChange(int(c["revision"]), c["kind"], c["op"], c["object"]) for c in body["changes"]
    ]
    return WatchPage(revision=int(body["revision"]), changes=changes)


def _event_page(response: httpx.Response) -> EventPage:
    body = response.json()
    return EventPage(items=body["items"], last=body.get("last"))


def _log_chunk(offset: int) -> Callable[[httpx.Response], LogChunk]:
    def parse(response: httpx.Response) -> LogChunk:
        return LogChunk(
            data=response.content,
            offset=int(response.headers.get("X-Jobd-Offset", offset + len(response.content))),
            done=response.headers.get("X-Jobd-Done", "false").lower() == "true",
        )

    return parse


def _blockers(dry_run: bool) -> Callable[[httpx.Response], BlockersResult]:
    def parse(response: httpx.Response) -> BlockersResult:
        body = response.json()
        return BlockersResult(
            candidate=int(body["candidate"]),
            worker=body.get("worker"),
            victims=body.get("victims", []),
            dry_run=bool(body.get("dry_run", dry_run)),
            workers=[str(w) for w in body.get("workers") or ()],
        )

    return parse


def _drained(response: httpx.Response) -> DrainResult:
    body = response.json()
    return DrainResult(
        worker=body["worker"],
        preempted=[int(i) for i in body.get("preempted", [])],
        remaining=body.get("remaining", []),
    )


def _registered(response: httpx.Response) -> Registered:
    body = response.json()
    return Registered(worker=body["worker"], revision=int(body["revision"]))


def _heartbeat_answer(response: httpx.Response) -> HeartbeatAnswer:
    body = response.json()
    return HeartbeatAnswer(worker=body.get("worker", {}), stop=[int(j) for j in body["stop"]])


def _report_results(response: httpx.Response) -> list[ReportResult]:
    return [
        ReportResult(int(r["job"]), int(r["status"]), r.get("phase"), r.get("detail"))
        for r in response.json()["results"]
    ]


def _accepted(response: httpx.Response) -> int:
    return int(response.json()["accepted"])


def _offset(response: httpx.Response) -> int:
    return int(response.json()["offset"])


# -- user operations


def apply(
    documents: Sequence[Document], *, dry_run: bool, objects: bool
) -> Call[list[ApplyResult]]:
    """Server-side apply; `objects=False` skips sending each object back."""
    body = {"documents": list(documents), "dry_run": dry_run}
    params = {"objects": _flag(objects)}
    return Call(routes.APPLY, routes.APPLY.url(), _apply_results, params=params, json=body)


def create_job(document: Document) -> Call[Document]:
    return Call(routes.CREATE_JOB, routes.CREATE_JOB.url(), _document, json=document)


def list_jobs(
    *,
    project: str | None = None,
    phase: Sequence[str] = (),
    worker: str | None = None,
    name: str | None = None,
    selector: str | None = None,
    limit: int | None = None,
) -> Call[JobList]:
    params = _params(
        project=project,
        phase=list(phase),
        worker=worker,
        name=name,
        selector=selector,
        limit=limit,
    )
    return Call(routes.LIST_JOBS, routes.LIST_JOBS.url(), _job_list, params=params)


def get_job(job_id: int) -> Call[Document]:
    return Call(routes.GET_JOB, routes.GET_JOB.url(job_id=job_id), _document)


def explain_job(job_id: int) -> Call[Document]:
    return Call(routes.EXPLAIN_JOB, routes.EXPLAIN_JOB.url(job_id=job_id), _document)


def delete_job(job_id: int) -> Call[Any]:
    return Call(routes.DELETE_JOB, routes.DELETE_JOB.url(job_id=job_id), _json)


def cancel_job(job_id: int) -> Call[Document]:
    return Call(routes.CANCEL_JOB, routes.CANCEL_JOB.url(job_id=job_id), _document)


def preempt_job(job_id: int) -> Call[Document]:
    return Call(routes.PREEMPT_JOB, routes.PREEMPT_JOB.url(job_id=job_id), _document)


def preempt_blockers(job_id: int, *, dry_run: bool) -> Call[BlockersResult]:
    route = routes.PREEMPT_BLOCKERS
    params = {"dry_run": _flag(dry_run)}
    return Call(route, route.url(job_id=job_id), _blockers(dry_run), params=params)


def resume_job(job_id: int, *, from_scratch: bool = False, force: bool = False) -> Call[Document]:
    route = routes.RESUME_JOB
    params = {"from_scratch": _flag(from_scratch), "force": _flag(force)}
    return Call(route, route.url(job_id=job_id), _document, params=params)


def create_array(document: Document) -> Call[Document]:
    return Call(routes.CREATE_ARRAY, routes.CREATE_ARRAY.url(), _document, json=document)


def list_arrays(*, project: str | None = None, name: str | None = None) -> Call[list[Document]]:
    params = _params(project=project, name=name)
    return Call(routes.LIST_ARRAYS, routes.LIST_ARRAYS.url(), _items, params=params)


def get_array(array_id: int) -> Call[Document]:
    return Call(routes.GET_ARRAY, routes.GET_ARRAY.url(array_id=array_id), _document)


def cancel_array(array_id: int) -> Call[Document]:
    return Call(routes.CANCEL_ARRAY, routes.CANCEL_ARRAY.url(array_id=array_id), _document)


def delete_array(array_id: int) -> Call[Document]:
    return Call(routes.DELETE_ARRAY, routes.DELETE_ARRAY.url(array_id=array_id), _document)


def list_workers() -> Call[list[Document]]:
    return Call(routes.LIST_WORKERS, routes.LIST_WORKERS.url(), _items)


def get_worker(name: str) -> Call[Document]:
    return Call(routes.GET_WORKER, routes.GET_WORKER.url(name=name), _document)


def cordon_worker(name: str) -> Call[Document]:
    return Call(routes.CORDON_WORKER, routes.CORDON_WORKER.url(name=name), _document)


def uncordon_worker(name: str) -> Call[Document]:
    return Call(routes.UNCORDON_WORKER, routes.UNCORDON_WORKER.url(name=name), _document)


def drain_worker(name: str, *, preempt: bool) -> Call[DrainResult]:
    """Cordon `name` (and preempt its preemptible jobs); the answer lists what is still bound."""
    route = routes.DRAIN_WORKER
    params = {"preempt": _flag(preempt)}
    return Call(route, route.url(name=name), _drained, params=params)


def list_projects() -> Call[list[Document]]:
    return Call(routes.LIST_PROJECTS, routes.LIST_PROJECTS.url(), _items)


def get_project(name: str) -> Call[Document]:
    return Call(routes.GET_PROJECT, routes.GET_PROJECT.url(name=name), _document)


def usage() -> Call[Document]:
    """Fair share's standings: projects' and users' usage, share and factor (`job usage`)."""
    return Call(routes.USAGE, routes.USAGE.url(), _document)


def whoami() -> Call[Document]:
    return Call(routes.WHOAMI, routes.WHOAMI.url(), _document)


# -- streams: held by the broker until something comes, when asked to follow


def read_logs(
    job_id: int,
    *,
    offset: int,
    follow: bool,
    timeout: float,
    tail: int | None = None,
    since_s: float | None = None,
    rank: int | None = None,
) -> Call[LogChunk]:
    """Output from `offset` (or from the last `tail` lines, the last `since_s` seconds):
    the job's own, or one member's of a multi-host job (`rank`)."""
    params = _params(
        offset=offset,
        tail=tail,
        since_s=since_s,
        rank=rank,
        follow=_flag(follow),
        timeout=timeout if follow else None,
    )
    return Call(
        routes.READ_LOGS,
        routes.READ_LOGS.url(job_id=job_id),
        _log_chunk(offset),
        params=params,
        hold=timeout if follow else None,
    )


def list_events(
    *,
    job: int | None = None,
    event_type: str | None = None,
    after: int | None = None,
    from_now: bool = False,
    follow: bool = False,
    timeout: float = 30.0,
) -> Call[EventPage]:
    params = _params(
        job=job,
        type=event_type,
        after=after,
        from_now=_flag(True) if from_now else None,
        follow=_flag(follow),
        timeout=timeout if follow else None,
    )
    hold = timeout if follow else None
    return Call(routes.LIST_EVENTS, routes.LIST_EVENTS.url(), _event_page, params=params, hold=hold)


def watch(
    since: int,
    *,
    kind: str | None = None,
    worker: str | None = None,
    project: str | None = None,
    name: str | None = None,
    phase: Sequence[str] = (),
    selector: str | None = None,
    timeout: float = 30.0,
    skip_own_reports: bool = False,
) -> Call[WatchPage]:
    """Changes after revision `since` (of the jobs a listing with the same filters shows,
    when one is given); ApiError 410 means list again and watch from there. skip_own_reports:
    not the changes a worker's own reports make (started, progress, complete)."""
    params = _params(
        since=since,
        kind=kind,
        worker=worker,
        project=project,
        name=name,
        phase=list(phase),
        selector=selector,
        timeout=timeout,
        skip_own_reports=_flag(True) if skip_own_reports else None,
    )
    return Call(routes.WATCH, routes.WATCH.url(), _watch_page, params=params, hold=timeout)


# -- the worker's operations


def register_worker(name: str, body: Registration | Body) -> Call[Registered]:
    route = routes.REGISTER_WORKER
    return _model_call(route, route.url(name=name), body, _registered)


def heartbeat(name: str, body: Heartbeat | Body) -> Call[HeartbeatAnswer]:
    route = routes.HEARTBEAT
    return _model_call(route, route.url(name=name), body, _heartbeat_answer)


def send_reports(name: str, body: ReportBatch | Body) -> Call[list[ReportResult]]:
    route = routes.REPORT_BATCH
    return _model_call(route, route.url(name=name), body, _report_results)


def ingest_events(body: WorkerEvents | Body) -> Call[int]:
    return _model_call(routes.INGEST_EVENTS, routes.INGEST_EVENTS.url(), body, _accepted)


def append_logs(job_id: int, offset: int, data: bytes, rank: int = 0) -> Call[int]:
    """Append `data` at byte `offset` of member `rank`'s output (0: a job of one node's);
    the answer is the offset the broker holds after it."""
    route = routes.APPEND_LOGS
    # A job of one node sends no rank: its request is byte for byte what it always was.
    params = {"offset": offset} if rank == 0 else {"offset": offset, "rank": rank}
    return Call(route, route.url(job_id=job_id), _offset, params=params, content=data)


# -- tokens: admins only


def create_token(body: TokenRequest) -> Call[TokenCreated]:
    route = routes.CREATE_TOKEN
    return _model_call(route, route.url(), body, _token_created)


def list_tokens() -> Call[list[TokenInfo]]:
    return Call(routes.LIST_TOKENS, routes.LIST_TOKENS.url(), _token_list)


def revoke_token(label: str) -> Call[Any]:
    return Call(routes.REVOKE_TOKEN, routes.REVOKE_TOKEN.url(label=label), _json)


# -- the web dashboard


def login_code() -> Call[Document]:
    """A one-time code and the dashboard's login path carrying it (`job ui`)."""
    return Call(routes.LOGIN_CODE, routes.LOGIN_CODE.url(), _document)


def _token_created(response: httpx.Response) -> TokenCreated:
    from jobd.wire.models import TokenCreated

    return TokenCreated.model_validate_json(response.content)


def _token_list(response: httpx.Response) -> list[TokenInfo]:
    from jobd.wire.models import TokenInfo

    return [TokenInfo.model_validate(item) for item in response.json()["items"]]


def _flag(value: bool) -> str:
    return "true" if value else "false"


def _params(**values: Any) -> dict[str, Any]:
    """Query parameters without the ones not said (None or an empty list)."""
    return {k: v for k, v in values.items() if v is not None and v != []}
