"""Every route of the broker's API: its method, path, what it reads and how it answers.

The broker declares its FastAPI routes (and so the OpenAPI document) from these, its
fast path matches them, and the clients build their requests from them: a path is
spelled once, here. Next stage: `calls.py` turns a route and its arguments into a
request and its answer into a value.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from jobd.api.frozen import Frozen
from jobd.api.vocabulary import MAX_ID, NAME_PATTERN, check_name

if TYPE_CHECKING:
    from pydantic import BaseModel

__all__ = [
    "APPEND_LOGS",
    "APPLY",
    "CANCEL_ARRAY",
    "CANCEL_JOB",
    "CORDON_WORKER",
    "CREATE_ARRAY",
    "CREATE_JOB",
    "CREATE_TOKEN",
    "DASHBOARD",
    "DELETE_ARRAY",
    "DELETE_JOB",
    "DRAIN_WORKER",
    "EXPLAIN_JOB",
    "GET_ARRAY",
    "GET_JOB",
    "GET_PROJECT",
    "GET_WORKER",
    "HEALTHZ",
    "HEARTBEAT",
    "INGEST_EVENTS",
    "LIST_ARRAYS",
    "LIST_EVENTS",
    "LIST_JOBS",
    "LIST_PROJECTS",
    "LIST_TOKENS",
    "LIST_WORKERS",
    "LOGIN_CODE",
    "METRICS",
    "OPENAPI",
    "PATH_PARAMS",
    "PATH_PARAM_SCHEMAS",
    "PREEMPT_BLOCKERS",
    "PREEMPT_JOB",
    "PUBLIC_PATHS",
    "READYZ",
    "READ_LOGS",
    "REGISTER_WORKER",
    "REPORTS",
    "REPORT_BATCH",
    "RESUME_JOB",
    "REVOKE_TOKEN",
    "ROUTES",
    "SMALL_BODY",
    "STATUS_REASONS",
    "UI_PREFIX",
    "UNCORDON_WORKER",
    "USAGE",
    "WATCH",
    "WHOAMI",
    "WORKER_PAYLOADS",
    "DashboardPaths",
    "Route",
    "allowed_methods",
    "body_cap",
    "find_route",
    "is_ui_path",
    "parse_path_param",
]

KiB, MiB = 1024, 1024 * 1024
# The body cap of a route that takes no body, and of a path no route has: room for a
# client that sends `{}` or a few headers' worth, never more. No route's cap is smaller
# (broker/http/bodylimit.py relies on it to pass small bodies without a lookup).
SMALL_BODY = 64 * KiB
ONE_DOCUMENT = 1 * MiB  # one job, registration, heartbeat or report, with room to spare

# What each refusal means, for the OpenAPI document: every route lists those it answers,
# each with the one error body of the API (`wire.models.ErrorBody`).
STATUS_REASONS: dict[int, str] = {
    401: "No valid bearer token",
    404: "No such job, worker or project (or no such route)",
    409: "The request conflicts with the resource's state (a stale resource_version, a "
    "transition its phase does not allow, a report of another run)",
    410: "The revision asked for has been compacted away: list again",
    413: "The request body is larger than this route's cap (the detail says it)",
    422: "A parameter or the body does not validate (the detail names the field)",
    426: "The worker's protocol version (X-Jobd-Protocol) is not one this broker takes "
    "(the detail names both)",
    503: "The store cannot be reached",
    507: "The store could not persist the write (a full disk)",
}

# The type of each path parameter, by its name in the templates below.
PATH_PARAMS: dict[str, type[int] | type[str]] = {
    "job_id": int,
    "array_id": int,
    "name": str,
    "label": str,
}
# What parse_path_param takes, as JSON Schema for the OpenAPI document.
PATH_PARAM_SCHEMAS: dict[str, dict[str, object]] = {
    "job_id": {"type": "integer", "minimum": 1, "maximum": MAX_ID},
    "array_id": {"type": "integer", "minimum": 1, "maximum": MAX_ID},
    "name": {"type": "string", "pattern": NAME_PATTERN},
    "label": {"type": "string", "pattern": NAME_PATTERN},
}


def parse_path_param(name: str, text: str) -> int | str:
    """A path parameter's value; ValueError, naming the parameter, for what no route takes.

    Every route's parameters are checked by this one function before a handler runs
    (broker/http/fastpath.py), so a job id the store cannot hold (2^63 and up) or a name no
    resource can have is a 422, never a handler's or the store's 500.
    """
    if PATH_PARAMS[name] is int:
        if not (text.isascii() and text.isdigit()) or not 1 <= int(text) <= MAX_ID:
            what = "an array id" if name == "array_id" else "a job id"
            raise ValueError(f"{name}: {text!r} is not {what} (an integer, 1 to {MAX_ID})")
        return int(text)
    try:
        return check_name(text)
    except ValueError as exc:
        raise ValueError(f"{name}: {text!r} {exc}") from None


class Route(Frozen):
    method: str
    path: str  # a template: `/jobs/{job_id}`
    summary: str
    # Its models, named in `jobd.wire.models` and loaded on first use (`body`, `query`):
    # a client only needs the method and path, and so never loads pydantic for them.
    body_model: str | None  # a JSON body of this model
    query_model: str | None  # query parameters, as this model's fields
    status: int  # the status of a success
    public: bool  # answered without a token (CONTRACT.md §8)
    # The largest body taken, in bytes: a larger one is refused (413) before it is read
    # (broker/http/bodylimit.py). Routes without a body take SMALL_BODY.
    max_body: int
    refuses: tuple[int, ...]  # refusals of its own, beyond those `refusals` derives

    def __init__(
        self,
        method: str,
        path: str,
        summary: str,
        body_model: str | None = None,
        query_model: str | None = None,
        status: int = 200,
        public: bool = False,
        max_body: int = SMALL_BODY,
        refuses: tuple[int, ...] = (),
    ) -> None:
        self._set(
            method=method,
            path=path,
            summary=summary,
            body_model=body_model,
            query_model=query_model,
            status=status,
            public=public,
            max_body=max_body,
            refuses=refuses,
        )

    def __hash__(self) -> int:
        # Every request looks its route up (access, the fast path): two fields say which
        # route it is, and records equal in all fields are equal in these.
        return hash((self.method, self.path))

    @property
    def body(self) -> type[BaseModel] | None:
        """The model of its JSON body, or None when it takes none."""
        return _model(self.body_model)

    @property
    def query(self) -> type[BaseModel] | None:
        """The model whose fields are its query parameters, or None."""
        return _model(self.query_model)

    def url(self, **params: int | str) -> str:
        """The path with its parameters filled in: `GET_JOB.url(job_id=7)` is `/jobs/7`."""
        return self.path.format_map(params) if params else self.path

    @property
    def params(self) -> tuple[str, ...]:
        """The names of the path's parameters, in order."""
        return tuple(s[1:-1] for s in self.path.split("/") if s.startswith("{"))

    @property
    def refusals(self) -> tuple[int, ...]:
        """Every error status this route answers, in order; each with an ErrorBody."""
        found = {413, *self.refuses}
        if not self.public:  # a token is checked; the store is read or written
            found |= {401, 503, 507}
        if self.params or self.body_model is not None or self.query_model is not None:
            found.add(422)
        if self.params:
            found.add(404)
        if (self.method, self.path) in _WORKER_KEYS:  # a worker's: its protocol is checked
            found |= {422, 426}
        return tuple(sorted(found))


@functools.cache
def _model(name: str | None) -> type[BaseModel] | None:
    if name is None:
        return None
    from jobd.wire import models

    found: type[BaseModel] = getattr(models, name)
    return found


def find_route(method: str, path: str) -> Route | None:
    """The route a request is for, its path parameters not yet checked; None: no route's.

    The one matcher of the broker (its token check, its body caps, its fast path, a 405's
    methods): an exact path is one dict look-up; a templated one, one per shape (where its
    parameters sit), the path's segments there masked as each template's are.
    """
    exact = _EXACT.get((method, path))
    if exact is not None:
        return exact
    parts = path.split("/")
    for at in _SHAPES.get((method, len(parts)), ()):
        found = _MASKED.get((method, _masked(parts, at)))
        if found is not None:
            return found
    return None


def body_cap(method: str, path: str) -> int:
    """The body cap of the route a request is for; SMALL_BODY when no route is."""
    route = find_route(method, path)
    return route.max_body if route is not None else SMALL_BODY


def allowed_methods(path: str) -> list[str]:
    """The methods the routes of this path answer (a 405's `Allow` header)."""
    return sorted(m for m in _METHODS if find_route(m, path) is not None)


def _masked(segments: list[str], at: tuple[int, ...]) -> tuple[str, ...]:
    masked = list(segments)
    for i in at:
        masked[i] = "{}"
    return tuple(masked)


# -- jobs, as users see them

APPLY = Route(
    "POST",
    "/apply",
    "Create or update each document (server-side apply)",
    body_model="ApplyRequest",
    query_model="ApplyQuery",
    max_body=32 * MiB,  # some 100,000 jobs of a manifest; a larger one: several applies
    refuses=(404, 409),  # 404: a job depends on one not stored
)
CREATE_JOB = Route(
    "POST",
    "/jobs",
    "Create one job (imperative submit)",
    body_model="Job",
    status=201,
    max_body=ONE_DOCUMENT,
    refuses=(404, 409),  # 404: it depends on a job not stored
)
LIST_JOBS = Route("GET", "/jobs", "List jobs, filtered", query_model="JobsQuery")
GET_JOB = Route("GET", "/jobs/{job_id}", "One job")
DELETE_JOB = Route("DELETE", "/jobs/{job_id}", "Remove a finished job", refuses=(409,))
CANCEL_JOB = Route(
    "POST", "/jobs/{job_id}/cancel", "Stop a job: desired phase Cancelled", refuses=(409,)
)
PREEMPT_JOB = Route(
    "POST", "/jobs/{job_id}/preempt", "Preempt this running job (job preempt)", refuses=(409,)
)
PREEMPT_BLOCKERS = Route(
    "POST",
    "/jobs/{job_id}/preempt-blockers",
    "Preempt what keeps a queued job out",
    query_model="BlockersQuery",
    refuses=(409,),
)
EXPLAIN_JOB = Route(
    "GET",
    "/jobs/{job_id}/explain",
    "Why a queued job is not running: per worker, its queue place, parents, preemption",
)
RESUME_JOB = Route(
    "POST",
    "/jobs/{job_id}/resume",
    "Resubmit from its checkpoint",
    query_model="ResumeQuery",
    status=201,
    refuses=(409,),
)
READ_LOGS = Route(
    "GET", "/jobs/{job_id}/logs", "The job's output from a byte offset", query_model="LogsQuery"
)

# -- job arrays: one spec, many member jobs (api/arrays.py)

CREATE_ARRAY = Route(
    "POST",
    "/arrays",
    "Create a job array and all its member jobs, in one transaction",
    body_model="JobArray",
    status=201,
    max_body=8 * MiB,  # a sweep of 10,000 members, each with its values
    refuses=(404, 409),  # 404: it depends on a job not stored; 409: a name is taken
)
LIST_ARRAYS = Route("GET", "/arrays", "List job arrays, filtered", query_model="ArraysQuery")
GET_ARRAY = Route("GET", "/arrays/{array_id}", "One job array, its members and their phases")
CANCEL_ARRAY = Route(
    "POST",
    "/arrays/{array_id}/cancel",
    "Cancel every member of the array that has not ended",
)
DELETE_ARRAY = Route(
    "DELETE",
    "/arrays/{array_id}",
    "Remove an array whose members have all ended, with those members",
    refuses=(409,),
)

# -- what workers send (WORKER_PAYLOADS, below: their protocol version is checked)

REGISTER_WORKER = Route(
    "PUT",
    "/workers/{name}",
    "Register (or re-register) a worker",
    body_model="Registration",
    max_body=ONE_DOCUMENT,
    refuses=(409,),
)
HEARTBEAT = Route(
    "POST",
    "/workers/{name}/heartbeat",
    "Renew the lease; reconcile jobs both ways",
    body_model="Heartbeat",
    max_body=ONE_DOCUMENT,
    refuses=(409,),
)
LIST_WORKERS = Route("GET", "/workers", "List workers")

# -- cordon and drain: what users do to a worker

GET_WORKER = Route("GET", "/workers/{name}", "One worker, with the jobs bound to it")
CORDON_WORKER = Route(
    "POST", "/workers/{name}/cordon", "Place no new job on this worker (job cordon)"
)
UNCORDON_WORKER = Route(
    "POST", "/workers/{name}/uncordon", "Place jobs on this worker again (job uncordon)"
)
DRAIN_WORKER = Route(
    "POST",
    "/workers/{name}/drain",
    "Cordon, optionally preempt the preemptible jobs; answers the jobs still bound",
    query_model="DrainQuery",
    refuses=(409,),
)
# Each report's summary and the name of its body's model, as models.REPORT_BODIES has it.
_REPORT_SUMMARIES = {
    "started": ("Worker: the workload process started", "Started"),
    "stopping": ("Worker: SIGTERM sent, grace running", "Report"),
    "complete": ("Worker: the workload exited", "Completion"),
    "checkpoint-complete": ("Worker: the sentinel was seen during the grace window", "Report"),
    "progress": ("Worker: the newest progress line the workload printed", "ProgressReport"),
}
# One route per report, `/jobs/{job_id}/<verb>`, each with its body of models.REPORT_BODIES.
REPORTS: dict[str, Route] = {
    verb: Route(
        "POST",
        f"/jobs/{{job_id}}/{verb}",
        summary,
        body_model=body,
        max_body=ONE_DOCUMENT,
        refuses=(409,),
    )
    for verb, (summary, body) in _REPORT_SUMMARIES.items()
}
REPORT_BATCH = Route(
    "POST",
    "/workers/{name}/reports",
    "Worker: several reports and events in one request, each answered on its own",
    body_model="ReportBatch",
    max_body=8 * MiB,  # what piled up while a worker's previous request was in flight
    refuses=(409,),
)
APPEND_LOGS = Route(
    "POST",
    "/jobs/{job_id}/logs",
    "Worker: append output at a byte offset",
    query_model="LogsAppendQuery",
    max_body=ONE_DOCUMENT,  # a worker ships output in chunks of 256 KiB
    refuses=(409,),
)
INGEST_EVENTS = Route(
    "POST",
    "/events",
    "Worker: ingest structured events into the record",
    body_model="WorkerEvents",
    max_body=ONE_DOCUMENT,
)

# -- the record, the watch, projects

WATCH = Route(
    "GET",
    "/watch",
    "Changes after a revision; held until one arrives",
    query_model="WatchQuery",
    refuses=(410,),
)
LIST_EVENTS = Route(
    "GET",
    "/events",
    "The event record (events.jsonl), optionally followed",
    query_model="EventsQuery",
)
LIST_PROJECTS = Route("GET", "/projects", "List projects")
GET_PROJECT = Route("GET", "/projects/{name}", "One project")
USAGE = Route(
    "GET", "/usage", "Fair share: each project's and user's decayed usage, share and factor"
)
WHOAMI = Route(
    "GET",
    "/whoami",
    "Who the broker knows the caller as: user, uid, groups, admin or not, how it knows, the "
    "projects reachable",
)

# -- tokens: admins only

CREATE_TOKEN = Route(
    "POST",
    "/tokens",
    "Make a token with a role (answered once, with the token in clear)",
    body_model="TokenRequest",
    status=201,
    refuses=(409,),  # a token of that label exists
)
LIST_TOKENS = Route("GET", "/tokens", "The tokens: labels, roles, scopes, times; never a token")
REVOKE_TOKEN = Route("DELETE", "/tokens/{label}", "Revoke a token: refused from the next request")

# -- the web dashboard (broker/ui/): its pages answer to a session cookie, not a token

UI_PREFIX = "/ui"
LOGIN_CODE = Route(
    "POST",
    "/login-codes",
    "A one-time code for the web dashboard's login URL, `/ui/login?code=...` (job ui)",
    status=201,
)


class DashboardPaths(Frozen):
    """The dashboard's pages, streams and files: HTML and server-sent events for a browser,
    not API routes (so not in ROUTES nor the OpenAPI document). The broker's ui package
    declares its routes from these and hands them to its templates as `ui`."""

    jobs: str = UI_PREFIX
    job: str = UI_PREFIX + "/jobs/{job_id}"
    job_stream: str = UI_PREFIX + "/jobs/{job_id}/stream"
    job_log_stream: str = UI_PREFIX + "/jobs/{job_id}/log-stream"
    jobs_stream: str = UI_PREFIX + "/stream/jobs"
    workers: str = UI_PREFIX + "/workers"
    timeline: str = UI_PREFIX + "/timeline"
    login: str = UI_PREFIX + "/login"
    logout: str = UI_PREFIX + "/logout"
    static: str = UI_PREFIX + "/static"

    def of_job(self, template: str, job_id: object) -> str:
        """`template` (one of the job's paths) for this job."""
        return template.replace("{job_id}", str(job_id))


DASHBOARD = DashboardPaths()


def is_ui_path(path: str) -> bool:
    """Whether `path` is the dashboard's: authenticated by its session cookie instead."""
    return path == UI_PREFIX or path.startswith(UI_PREFIX + "/")


# -- monitors, and the API's own description

HEALTHZ = Route("GET", "/healthz", "Liveness", public=True)
READYZ = Route("GET", "/readyz", "Readiness: the store answers", public=True)
METRICS = Route("GET", "/metrics", "Prometheus text exposition", public=True)
OPENAPI = Route("GET", "/openapi.json", "The OpenAPI document of this API")

ROUTES: tuple[Route, ...] = (
    APPLY,
    CREATE_JOB,
    LIST_JOBS,
    GET_JOB,
    DELETE_JOB,
    CANCEL_JOB,
    PREEMPT_JOB,
    PREEMPT_BLOCKERS,
    EXPLAIN_JOB,
    RESUME_JOB,
    READ_LOGS,
    CREATE_ARRAY,
    LIST_ARRAYS,
    GET_ARRAY,
    CANCEL_ARRAY,
    DELETE_ARRAY,
    REGISTER_WORKER,
    HEARTBEAT,
    LIST_WORKERS,
    GET_WORKER,
    CORDON_WORKER,
    UNCORDON_WORKER,
    DRAIN_WORKER,
    *REPORTS.values(),
    REPORT_BATCH,
    APPEND_LOGS,
    INGEST_EVENTS,
    WATCH,
    LIST_EVENTS,
    LIST_PROJECTS,
    GET_PROJECT,
    USAGE,
    WHOAMI,
    CREATE_TOKEN,
    LIST_TOKENS,
    REVOKE_TOKEN,
    LOGIN_CODE,
    HEALTHZ,
    READYZ,
    METRICS,
    OPENAPI,
)
PUBLIC_PATHS = frozenset(r.path for r in ROUTES if r.public)
# What agents send: taken only from the worker protocols the broker accepts (protocol.py).
WORKER_PAYLOADS = frozenset(
    {REGISTER_WORKER, HEARTBEAT, *REPORTS.values(), REPORT_BATCH, APPEND_LOGS, INGEST_EVENTS}
)
_WORKER_KEYS = frozenset((r.method, r.path) for r in WORKER_PAYLOADS)
assert all(r.max_body >= SMALL_BODY for r in ROUTES), "a cap under SMALL_BODY"
# find_route's index: exact paths; templated ones by their masked segments, and the
# shapes (where parameters sit) of each method and number of segments.
_EXACT: dict[tuple[str, str], Route] = {}
_MASKED: dict[tuple[str, tuple[str, ...]], Route] = {}
_SHAPES: dict[tuple[str, int], list[tuple[int, ...]]] = {}
for _route in ROUTES:
    if not _route.params:
        _EXACT[(_route.method, _route.path)] = _route
        continue
    _segments = _route.path.split("/")
    _at = tuple(i for i, s in enumerate(_segments) if s.startswith("{"))
    _shapes = _SHAPES.setdefault((_route.method, len(_segments)), [])
    if _at not in _shapes:
        _shapes.append(_at)
    _MASKED[(_route.method, _masked(_segments, _at))] = _route
_METHODS = frozenset(route.method for route in ROUTES)
