"""The bodies and query parameters of the broker's routes, as the broker parses them.

The worker and the CLI build their requests from these same models, so a field is
declared once for every side. Reports have one model each (`Started`, `Completion`, ...);
the batched report a worker sends to `POST /workers/{name}/reports` is derived from them
(`REPORT_BODIES`), so adding a field to a report is one edit here. Resource documents
(`Job`, `WorkerSpec`) come from `jobd.api`. Next stage: `routes.py` names the path and
method each model travels on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal, Self, Union

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, create_model, model_validator

from jobd.api.addresses import check_address
from jobd.api.arrays import JobArray
from jobd.api.identity import (
    MAX_USER_NAME,
    MAX_WORKER_USERS,
    RUNS_AS_PATTERN,
    USER_NAME_PATTERN,
    check_user_name,
)
from jobd.api.models import (
    GPU_INDEX_TEXT,
    MAX_GPU_INDEX,
    MAX_ID,
    MAX_INT,
    MAX_NODES,
    NAME_PATTERN,
    CoreSet,
    GpuUsage,
    Job,
    ObjectMeta,
    Phase,
    Project,
    StoreId,
    StoreInt,
    WorkerSpec,
    check_name,
)
from jobd.api.progress import MAX_METRIC_KEY, MAX_METRIC_TEXT, MAX_METRICS
from jobd.api.selectors import SELECTOR_PATTERN, parse_selector

# A job id as an object's key (JSON keys are text): 0 to MAX_ID, digit by digit.
_JOB_ID_TEXT = (
    "^(0|[1-9][0-9]{0,8}|1[0-9]{9}|20[0-9]{8}|21[0-3][0-9]{7}|214[0-6][0-9]{6}"
    "|2147[0-3][0-9]{5}|21474[0-7][0-9]{4}|214748[0-2][0-9]{3}|2147483[0-5][0-9]{2}"
    "|21474836[0-3][0-9]|214748364[0-7])$"
)
assert MAX_ID == 2147483647, "_JOB_ID_TEXT spells MAX_ID out"
# A run's fencing number (status.attempt): bumped once per bind, never near this.
Attempt = Annotated[int, Field(ge=0, le=MAX_ID)]

__all__ = [
    "BATCHED_REPORTS",
    "REPORT_BODIES",
    "ApplyDocuments",
    "ApplyQuery",
    "ApplyRequest",
    "ArraysQuery",
    "Attempt",
    "BatchedReport",
    "BlockersQuery",
    "Completion",
    "Delivery",
    "DrainQuery",
    "ErrorBody",
    "EventsQuery",
    "Health",
    "Heartbeat",
    "Instance",
    "JobArray",
    "JobsQuery",
    "LogsAppendQuery",
    "LogsQuery",
    "ProgressReport",
    "ProjectUsage",
    "Registration",
    "Report",
    "ReportBatch",
    "ResumeQuery",
    "Started",
    "TokenCreated",
    "TokenInfo",
    "TokenRequest",
    "UsageReport",
    "UsageWeights",
    "UserUsage",
    "WatchQuery",
    "WhoAmI",
    "WorkerEvent",
    "WorkerEvents",
]


class _Body(BaseModel):
    # Strict: a request says `1`, `true`, `"text"` as the schema does; `"1"` for a number
    # or `1` for a flag is refused (422) rather than guessed. No NaN or infinity.
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


class _Query(BaseModel):
    # Query parameters arrive as text: parsed by type (lax), but never NaN or infinity.
    model_config = ConfigDict(allow_inf_nan=False)


class ErrorBody(BaseModel):
    """What every refusal of the API answers, whatever its status (400s and 500s alike)."""

    detail: str = Field(
        description="One sentence: `field.path: reason` for a 422, else what was refused and why"
    )


class Health(BaseModel):
    """/healthz: `ok`, or `failing` with the loops being restarted and why."""

    status: Literal["ok", "failing"]
    loops: dict[str, str] = Field(default_factory=dict)


class ProjectUsage(BaseModel):
    """A project's fair-share standing (`GET /usage`, `job usage`)."""

    project: str
    usage: float = Field(description="decayed usage, billed resource-seconds")
    shares: int
    share: float = Field(description="its shares over every project's in play")
    usage_share: float = Field(description="its part of everyone's usage")
    factor: float = Field(description="2^(-usage_share/share): 1 unused, 0.5 on target")


class UserUsage(BaseModel):
    """A user's fair-share standing within a project."""

    project: str
    user: str
    usage: float
    share: float
    usage_share: float
    factor: float


class UsageWeights(BaseModel):
    gpu: float
    cpu: float
    memory_gib: float


class UsageReport(BaseModel):
    """`GET /usage`: the half-life, the billing weights, and each project's and user's
    standing (docs/concepts.md, "Fair share")."""

    half_life_s: float
    weights: UsageWeights
    projects: list[ProjectUsage]
    users: list[UserUsage]


# -- user requests ---------------------------------------------------------------------------


class ApplyRequest(_Body):
    documents: list[dict[str, Any]] = Field(min_length=1)
    dry_run: bool = False


class _NamedMeta(ObjectMeta):
    name: str = Field(json_schema_extra={"pattern": NAME_PATTERN})


class _AppliedJob(Job):
    kind: Literal["Job"]  # an apply's document says its kind, and its name
    metadata: _NamedMeta


class _AppliedProject(Project):
    kind: Literal["Project"]
    metadata: _NamedMeta


class ApplyDocuments(_Body):
    """ApplyRequest as the OpenAPI document shows it: each document a Job or a Project
    that says its kind. The broker reads the documents one by one (api/manifests.py), so a
    refusal names the document and field."""

    documents: list[_AppliedJob | _AppliedProject] = Field(min_length=1)
    dry_run: bool = False


class ApplyQuery(_Query):
    objects: bool = Field(
        default=True, description="Each result carries the object; false: kind, name, action"
    )


def _check_selector(value: str | None) -> str | None:
    if value is not None:
        parse_selector(value)  # ValueError: a 422 naming the field
    return value


def _selector_field() -> Any:
    return Field(
        default=None,
        max_length=4096,
        json_schema_extra={"pattern": SELECTOR_PATTERN},
        description="Labels the jobs must have, as kubectl's -l: "
        "`team=vision,tier!=batch,owner,!scratch`",
    )


_Selector = Annotated[str | None, AfterValidator(_check_selector)]


class JobsQuery(_Query):
    project: str | None = None
    phase: list[Phase] | None = None
    worker: str | None = None
    name: str | None = None
    selector: _Selector = _selector_field()
    limit: StoreInt | None = Field(default=None, ge=1)


class ArraysQuery(_Query):
    project: str | None = None
    name: str | None = None


class BlockersQuery(_Query):
    dry_run: bool = False


class ResumeQuery(_Query):
    from_scratch: bool = Field(
        default=False, description="Start the new job without RESUME_FROM, from the beginning"
    )
    force: bool = Field(
        default=False,
        description="Point RESUME_FROM at the checkpoint directory even though no checkpoint "
        "completed",
    )


class DrainQuery(_Query):
    preempt: bool = Field(
        default=False, description="Also preempt the worker's preemptible running jobs"
    )


class LogsQuery(_Query):
    offset: StoreInt = 0
    tail: StoreInt | None = Field(
        default=None, description="Start at the output's last N lines (or later, by offset)"
    )
    since_s: float | None = Field(
        default=None,
        ge=0,
        le=MAX_INT,
        description="Start at the output that reached the broker in the last N seconds",
    )
    follow: bool = False
    timeout: float = Field(default=30.0, ge=0, le=300)
    rank: int | None = Field(
        default=None,
        ge=0,
        lt=MAX_NODES,
        description="Read one member of a multi-host job, unprefixed (default: every "
        "member's lines interleaved, each behind `[rank N] `)",
    )


class EventsQuery(_Query):
    job: StoreId | None = None
    type: str | None = None
    after: StoreId = 0
    from_now: bool = Field(
        default=False,
        description="Start after the newest event (instead of `after`): only events to come",
    )
    follow: bool = False
    timeout: float = Field(default=30.0, ge=0, le=300)
    limit: int = Field(default=1000, ge=1, le=10_000)


class WatchQuery(_Query):
    """The watch's query parameters (parsed by the broker's fast path, see fastpath.py)."""

    since: StoreInt = 0
    kind: str | None = None
    worker: str | None = None
    # The filters of a listing (JobsQuery), so a watch passes the changes of the jobs its
    # list showed: set, they pass only jobs.
    project: str | None = None
    name: str | None = None
    phase: list[Phase] | None = None
    selector: _Selector = _selector_field()
    timeout: float = Field(default=30.0, ge=0, le=300)
    skip_own_reports: bool = Field(
        default=False,
        description="leave out the changes a worker's own reports make (`started`, "
        "`progress`, `complete`): of a job with no signal set that is Running, or that has "
        "ended after it started",
    )


# -- the worker's requests -------------------------------------------------------------------


# The agent's instance id (worker/identity.py: made once, kept in its state directory).
Instance = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")]


def _instance_field() -> Any:
    return Field(
        default=None,
        description="The agent's instance id, kept in its state directory: while one "
        "instance holds the worker's lease, another is refused (409)",
    )


def _epoch_field() -> Any:
    return Field(
        default=None,
        description="The lease's fencing epoch the agent's registration was answered with "
        "(status.epoch): a request of an older epoch is refused (409)",
    )


# A user name as a worker publishes it (api/identity.py), checked here: 422 otherwise.
UserName = Annotated[str, Field(pattern=USER_NAME_PATTERN, max_length=MAX_USER_NAME)]


def _users_field() -> Any:
    return Field(
        default=None,
        max_length=MAX_WORKER_USERS,
        description="The owners whose jobs may be placed on this worker (the users its "
        "host knows); null: any owner",
    )


class Registration(_Body):
    spec: WorkerSpec
    hostname: str = ""
    runner: str = ""
    instance: Instance | None = _instance_field()
    # Whom the worker runs jobs as: `owner` (it is root), or its own user's name (or uid).
    runs_as: str | None = Field(default=None, pattern=RUNS_AS_PATTERN)
    users: list[UserName] | None = _users_field()
    # Where the other members of a multi-host job reach this host (`--advertise-address`,
    # else the address the agent reaches the broker from): an IP address or a host name.
    address: Annotated[str, AfterValidator(check_address)] | None = None


class Heartbeat(_Body):
    instance: Instance | None = _instance_field()
    epoch: StoreInt | None = _epoch_field()
    running: list[StoreId] = Field(default_factory=list)
    # The attempt of each job in `running` (job id -> status.attempt), so the broker
    # tells an old run from a new one of the same job on this worker.
    attempts: dict[StoreId, Attempt] = Field(
        default_factory=dict, json_schema_extra={"propertyNames": {"pattern": _JOB_ID_TEXT}}
    )
    # Bytes in use on each GPU no job here holds (NVML); None: the worker cannot measure.
    gpu_memory_foreign: dict[Annotated[int, Field(ge=0, le=MAX_GPU_INDEX)], StoreInt] | None = (
        Field(default=None, json_schema_extra={"propertyNames": {"pattern": GPU_INDEX_TEXT}})
    )
    # Each GPU's memory in use and utilisation (NVML); None: the worker cannot measure.
    gpu_usage: dict[Annotated[int, Field(ge=0, le=MAX_GPU_INDEX)], GpuUsage] | None = Field(
        default=None, json_schema_extra={"propertyNames": {"pattern": GPU_INDEX_TEXT}}
    )
    # Why the disk of the worker's state directory is full, while it is (None: it has room,
    # or an agent older than this field): the broker places no job there meanwhile.
    disk_full: str | None = Field(default=None, max_length=1024)
    # The owners placeable here, when they changed since the registration (a user added
    # to the host); null: unchanged.
    users: list[UserName] | None = _users_field()


class LogsAppendQuery(_Query):
    offset: StoreInt = 0
    rank: int = Field(
        default=0,
        ge=0,
        lt=MAX_NODES,
        description="Which member of a multi-host job wrote it (0 for a job of one node)",
    )


class WorkerEvent(_Body):
    event: str = Field(min_length=1, max_length=64)
    job: StoreId | None = None
    ts: str = Field(default="", max_length=40, description="when the worker saw it (RFC 3339)")
    fields: dict[str, Any] = Field(default_factory=dict)


class Delivery(_Body):
    """Which request of its kind this is, so one sent again after an unknown outcome (the
    connection cut after it went out; a broker killed after its commit, before answering)
    is answered again and not applied twice: `run` is the agent's run (made at each of its
    starts), `seq` counts that run's requests of the kind, one in flight at a time. The
    broker keeps the last applied per worker, with its answer, in the same transaction."""

    run: Instance
    seq: StoreInt = Field(ge=1)


def _delivery_field() -> Any:
    return Field(
        default=None,
        description="The request's number within the agent's run: one applied already is "
        "answered again, not applied twice (absent: applied as it comes)",
    )


class WorkerEvents(_Body):
    worker: str
    events: list[WorkerEvent]
    delivery: Delivery | None = _delivery_field()


class Report(_Body):
    """What every report says: who makes it, and of which run (the job's `status.attempt`
    when the worker got it). `stopping` and `checkpoint-complete` say no more.

    A report for another attempt than the job's, or from a worker the job is not bound
    to, is refused (409). A report without an attempt (an agent older than fencing) is
    judged by its worker alone. `rank`: which member of a multi-host job reports (0 for
    a job of one node); the worker must be that member's.
    """

    worker: str
    attempt: Attempt | None = None
    rank: int = Field(default=0, ge=0, lt=MAX_NODES)


class Started(Report):
    checkpoint_dir: str | None = None
    cpuset: CoreSet | None = None  # the cores the workload is pinned to (None: not pinned)
    # Rank 0 of a multi-host job: the free port it chose on its host (JOBD_MASTER_PORT).
    master_port: int | None = Field(default=None, ge=1, le=65535)


class Completion(Report):
    # What a process can exit with (negative: Python's way of saying a signal), and a
    # signal's number: bounded, so nothing downstream meets an integer it cannot store.
    exit_code: int | None = Field(default=None, ge=-(2**31), le=2**31 - 1)
    signal: int | None = Field(default=None, ge=1, le=255)
    checkpoint_latest: str | None = None
    # Set when jobd, not the workload, decided the end: start_failed (it could not be
    # started), host_restarted or supervisor_lost (its end was never recorded).
    reason: str | None = Field(default=None, max_length=64)
    message: str | None = Field(default=None, max_length=4096)


# Numbers a workload reported: a float64 holds every integer up to MAX_INT exactly. Each
# member of a union carries its own bounds, so the OpenAPI document states them.
_Number = Annotated[int, Field(ge=-MAX_INT, le=MAX_INT)] | float
_Step = Annotated[int, Field(ge=0, le=MAX_INT)] | Annotated[float, Field(ge=0)]
_Total = Annotated[int, Field(gt=0, le=MAX_INT)] | Annotated[float, Field(gt=0)]


class ProgressReport(Report):
    """The newest `jobd-progress` line the worker read, as api/progress.py reads one
    (the worker sends at most one a second per job; the broker adds fraction and ETA)."""

    step: _Step
    total: _Total | None = None
    metrics: dict[
        Annotated[str, Field(min_length=1, max_length=MAX_METRIC_KEY)],
        _Number | Annotated[str, Field(max_length=MAX_METRIC_TEXT)],
    ] = Field(default_factory=dict, max_length=MAX_METRICS)


# Each report's body, by the verb that names it in a batch and ends its own path.
REPORT_BODIES: dict[str, type[Report]] = {
    "started": Started,
    "stopping": Report,
    "complete": Completion,
    "checkpoint-complete": Report,
    "progress": ProgressReport,
}


class _BatchedReportBase(_Body):
    """One report of a batch: the job, the verb, and that verb's own fields (not the worker,
    which the batch's path names)."""

    job: StoreId
    verb: str  # one of REPORT_BODIES, as each derived model says


def _batched_reports(bodies: dict[str, type[Report]]) -> dict[str, type[_BatchedReportBase]]:
    """A batch item for each verb of `bodies`: its fields but `worker`. An item holds the
    fields of its own verb only, as the schema says (the items are told apart by `verb`)."""
    items: dict[str, type[_BatchedReportBase]] = {}
    for verb, body in bodies.items():
        fields: dict[str, Any] = {"verb": (Literal[verb], ...)}
        for name, info in body.model_fields.items():
            if name != "worker":
                fields[name] = (info.annotation, info)
        title = "Batched" + "".join(w.title() for w in verb.split("-"))
        items[verb] = create_model(title, __base__=_BatchedReportBase, **fields)
    return items


# Each verb's batch item, for the worker to build one (`BATCHED_REPORTS[verb](...)`).
BATCHED_REPORTS = _batched_reports(REPORT_BODIES)

if TYPE_CHECKING:  # the union of the derived models is only known when they are made
    BatchedReport = _BatchedReportBase
else:
    BatchedReport = Annotated[
        Union[tuple(BATCHED_REPORTS.values())],  # noqa: UP007 - a union built at run time
        Field(discriminator="verb"),
    ]


class ReportBatch(_Body):
    """What piled up at a worker: reports and events. The agent reports only so, saying
    who sends (`instance`, `epoch`): a batch of an instance that does not hold the
    worker's lease is refused whole (409)."""

    instance: Instance | None = _instance_field()
    epoch: StoreInt | None = _epoch_field()
    reports: list[BatchedReport] = Field(default_factory=list)
    events: list[WorkerEvent] = Field(default_factory=list)
    delivery: Delivery | None = _delivery_field()


# -- tokens (admins only) --------------------------------------------------------------------

_Name = Annotated[
    str, AfterValidator(check_name), Field(json_schema_extra={"pattern": NAME_PATTERN})
]
_UserName = Annotated[
    str,
    AfterValidator(check_user_name),
    Field(json_schema_extra={"pattern": USER_NAME_PATTERN, "maxLength": MAX_USER_NAME}),
]
Role = Literal["admin", "user", "worker"]
# The role's rules below, said in the schema too, so a client (or a fuzzer) is told them.
_BY_ROLE: dict[str, Any] = {
    "oneOf": [
        {
            "properties": {
                "role": {"const": "admin"},
                "projects": {"maxItems": 0},
                "worker": {"type": "null"},
                "user": {"type": "null"},
            }
        },
        {
            "properties": {
                "role": {"const": "user"},
                "worker": {"type": "null"},
            },
            # A user's projects, or a user (who reaches the projects it is a member of).
            "anyOf": [
                {"properties": {"projects": {"minItems": 1}}, "required": ["projects"]},
                {"properties": {"user": {"type": "string"}}, "required": ["user"]},
            ],
        },
        {
            "properties": {
                "role": {"const": "worker"},
                "projects": {"maxItems": 0},
                "worker": {"type": "string"},
                "user": {"type": "null"},
            },
            "required": ["worker"],
        },
    ]
}


class TokenRequest(_Body):
    """A token to make: a user token names its user or its projects (or both: the user's
    projects narrowed to those), a worker token its worker."""

    model_config = ConfigDict(json_schema_extra=_BY_ROLE)

    role: Role
    projects: list[_Name] = Field(default_factory=list, max_length=1000)
    worker: _Name | None = None
    name: _Name | None = Field(default=None, description="its label; made up when not given")
    user: _UserName | None = Field(
        default=None,
        description="the Unix user a user token speaks for: its jobs are that user's, and it "
        "reaches the projects the user is a member of (narrowed by `projects` when given)",
    )

    @model_validator(mode="after")
    def _scoped_by_role(self) -> Self:
        if self.role == "user" and not self.projects and self.user is None:
            raise ValueError("a user token needs its user (--user) or a project (--project)")
        if self.role != "user" and self.projects:
            raise ValueError(f"only user tokens take projects, not {self.role} tokens")
        if self.role != "user" and self.user is not None:
            raise ValueError(f"only user tokens take a user, not {self.role} tokens")
        if self.role == "worker" and self.worker is None:
            raise ValueError("a worker token needs its worker's name (--worker)")
        if self.role != "worker" and self.worker is not None:
            raise ValueError(f"only worker tokens take a worker, not {self.role} tokens")
        return self


class TokenInfo(BaseModel):
    """A token as listed: never the token itself, which nobody keeps."""

    label: str
    role: Role
    projects: list[str] = Field(default_factory=list)
    worker: str | None = None
    user: str | None = None
    created_at: str
    last_used_at: str | None = None


class WhoAmI(BaseModel):
    """Who the broker knows the caller as (`GET /whoami`, `job whoami`)."""

    user: str | None = Field(description="the Unix user; none for a token of no user")
    uid: int | None = Field(description="the user's uid on the broker's host, when known")
    groups: list[str] = Field(description="the user's groups on the broker's host")
    role: Role
    admin: bool
    via: Literal["socket", "token", "vouched"] = Field(
        description="how the broker knows: the Unix socket's peer, a token, or a worker's "
        "agent vouching for its host's user"
    )
    label: str = Field(description="the token's label, the peer's uid, or who vouched")
    projects: list[str] | None = Field(description="the projects reachable; null: all (admins)")
    admin_of: list[str] = Field(description="the projects whose every job it may change")
    worker: str | None = None


class TokenCreated(TokenInfo):
    token: str = Field(description="the bearer token, shown this once")
