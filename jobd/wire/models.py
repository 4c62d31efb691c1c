"""The bodies and query parameters of the broker's routes, as the broker parses them.

The worker and the CLI build their requests from these same models, so a field is
declared once for every side. Reports have one model each (`Started`, `Completion`, ...);
the batched report a worker sends to `POST /workers/{name}/reports` is derived from them
(`REPORT_BODIES`), so adding a field to a report is one edit here. Resource documents
(`Job`, `WorkerSpec`) come from `jobd.api`. Next stage: `routes.py` names the path and
method each model travels on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal, Self

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, create_model, model_validator
from pydantic.fields import FieldInfo

from jobd.api.models import Phase, StoreId, StoreInt, WorkerSpec, check_name

__all__ = [
    "REPORT_BODIES",
    "ApplyQuery",
    "ApplyRequest",
    "BatchedReport",
    "BlockersQuery",
    "Completion",
    "DrainQuery",
    "EventsQuery",
    "Heartbeat",
    "JobsQuery",
    "LogsAppendQuery",
    "LogsQuery",
    "Registration",
    "Report",
    "ReportBatch",
    "Started",
    "TokenCreated",
    "TokenInfo",
    "TokenRequest",
    "WatchQuery",
    "WorkerEvent",
    "WorkerEvents",
]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


# -- user requests ---------------------------------------------------------------------------


class ApplyRequest(_Body):
    documents: list[dict[str, Any]] = Field(min_length=1)
    dry_run: bool = False


class ApplyQuery(BaseModel):
    objects: bool = Field(
        default=True, description="Each result carries the object; false: kind, name, action"
    )


class JobsQuery(BaseModel):
    project: str | None = None
    phase: list[Phase] | None = None
    worker: str | None = None
    name: str | None = None
    limit: StoreInt | None = Field(default=None, ge=1)


class BlockersQuery(BaseModel):
    dry_run: bool = False


class DrainQuery(BaseModel):
    preempt: bool = Field(
        default=False, description="Also preempt the worker's preemptible running jobs"
    )


class LogsQuery(BaseModel):
    offset: StoreInt = 0
    follow: bool = False
    timeout: float = Field(default=30.0, ge=0, le=300)


class EventsQuery(BaseModel):
    job: StoreId | None = None
    type: str | None = None
    after: StoreId = 0
    follow: bool = False
    timeout: float = Field(default=30.0, ge=0, le=300)
    limit: int = Field(default=1000, ge=1, le=10_000)


class WatchQuery(BaseModel):
    """The watch's query parameters (parsed by the broker's fast path, see fastpath.py)."""

    since: StoreInt = 0
    kind: str | None = None
    worker: str | None = None
    timeout: float = Field(default=30.0, ge=0, le=300)


# -- the worker's requests -------------------------------------------------------------------


class Registration(_Body):
    spec: WorkerSpec
    hostname: str = ""
    runner: str = ""


class Heartbeat(_Body):
    running: list[StoreId] = Field(default_factory=list)
    # The attempt of each job in `running` (job id -> status.attempt), so the broker
    # tells an old run from a new one of the same job on this worker.
    attempts: dict[StoreId, int] = Field(default_factory=dict)


class LogsAppendQuery(BaseModel):
    offset: StoreInt = 0


class WorkerEvent(_Body):
    event: str = Field(min_length=1, max_length=64)
    job: StoreId | None = None
    ts: str = Field(default="", max_length=40, description="when the worker saw it (RFC 3339)")
    fields: dict[str, Any] = Field(default_factory=dict)


class WorkerEvents(_Body):
    worker: str
    events: list[WorkerEvent]


class Report(_Body):
    """What every report says: who makes it, and of which run (the job's `status.attempt`
    when the worker got it). `stopping` and `checkpoint-complete` say no more.

    A report for another attempt than the job's, or from a worker the job is not bound
    to, is refused (409). A report without an attempt (an agent older than fencing) is
    judged by its worker alone.
    """

    worker: str
    attempt: int | None = Field(default=None, ge=0)


class Started(Report):
    checkpoint_dir: str | None = None


class Completion(Report):
    exit_code: int | None = None
    signal: int | None = None
    checkpoint_latest: str | None = None
    # Set when jobd, not the workload, decided the end: start_failed (it could not be
    # started), host_restarted or supervisor_lost (its end was never recorded).
    reason: str | None = Field(default=None, max_length=64)
    message: str | None = Field(default=None, max_length=4096)


# Each report's body, by the verb that names it in a batch and ends its own path.
REPORT_BODIES: dict[str, type[Report]] = {
    "started": Started,
    "stopping": Report,
    "complete": Completion,
    "checkpoint-complete": Report,
}


class _BatchedReportBase(_Body):
    """One report of a batch: the job, the verb, and that verb's own fields (not the worker,
    which the batch's path names)."""

    job: StoreId
    verb: str  # one of REPORT_BODIES, as the derived model says


def _batched_report(bodies: dict[str, type[Report]]) -> type[_BatchedReportBase]:
    """The batched report: a verb of `bodies`, and every field of every report body but
    `worker`, each optional.

    A field two reports share must mean the same in both, since a batch item carries it
    under one name whatever its verb.
    """
    fields: dict[str, Any] = {"verb": (Literal[tuple(bodies)], ...)}
    for body in bodies.values():
        for name, info in body.model_fields.items():
            if name == "worker" or name in fields:
                assert name not in fields or fields[name][0] == info.annotation, name
                continue
            # Optional here, with the constraints its body gives it.
            fields[name] = (info.annotation, FieldInfo.merge_field_infos(info, default=None))
    return create_model(
        "BatchedReport",
        __base__=_BatchedReportBase,
        __doc__="One of the per-job reports, for the batch route: the verb names which.",
        **fields,
    )


if TYPE_CHECKING:  # the derived model's own fields are only known when it is made
    BatchedReport = _BatchedReportBase
else:
    BatchedReport = _batched_report(REPORT_BODIES)


class ReportBatch(_Body):
    reports: list[BatchedReport] = Field(default_factory=list)
    events: list[WorkerEvent] = Field(default_factory=list)


# -- tokens (admins only) --------------------------------------------------------------------

_Name = Annotated[str, AfterValidator(check_name)]
Role = Literal["admin", "user", "worker"]


class TokenRequest(_Body):
    """A token to make: a user token names its projects, a worker token its worker."""

    role: Role
    projects: list[_Name] = Field(default_factory=list, max_length=1000)
    worker: _Name | None = None
    name: _Name | None = Field(default=None, description="its label; made up when not given")

    @model_validator(mode="after")
    def _scoped_by_role(self) -> Self:
        if self.role == "user" and not self.projects:
            raise ValueError("a user token needs at least one project (--project)")
        if self.role != "user" and self.projects:
            raise ValueError(f"only user tokens take projects, not {self.role} tokens")
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
    created_at: str
    last_used_at: str | None = None


class TokenCreated(TokenInfo):
    token: str = Field(description="the bearer token, shown this once")
