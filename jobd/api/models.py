"""The resource documents of jobd: Job, Project and Worker (CONTRACT.md §3).

Everything a user writes or reads goes through these models, so validation is strict
(`extra="forbid"`): a typo in a field name is an error, never silently ignored. Server-set
fields live in `metadata` and `status`; the store and controllers fill them in.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from jobd.api.field_options import NoOption, Option
from jobd.api.identity import (
    MAX_MEMBERS,
    MAX_USER_NAME,
    MAX_WORKER_USERS,
    MEMBER_PATTERN,
    RUNS_AS_PATTERN,
    USER_NAME_PATTERN,
    check_member,
    check_user_name,
)
from jobd.api.labels import (
    LABEL_KEY_PATTERN,
    LABEL_VALUE_PATTERN,
    MAX_KEY_LENGTH,
    MAX_VALUE_LENGTH,
    check_label_key,
    check_label_value,
)
from jobd.api.secrets import MAX_PATTERN_LENGTH, MAX_PATTERNS, check_patterns
from jobd.api.sizes import MAX_SIZE, SIZE_PATTERN, parse_size
from jobd.api.vocabulary import (
    API_VERSION,
    BOUND_PHASES,
    DEFAULT_PROJECT,
    MAX_GRACE_S,
    MAX_ID,
    MAX_INT,
    MAX_NODES,
    NAME_PATTERN,
    SCRUBBED_PHASES,
    TERMINAL_PHASES,
    Phase,
    WorkerPhase,
    check_name,
    normalise_worker_name,
)

__all__ = [
    "ADMISSION",
    "ADMISSION_KEY",
    "API_VERSION",
    "BOUND_PHASES",
    "DEFAULT_PROJECT",
    "GPU_INDEX_TEXT",
    "MAX_ATTEMPTS_KEPT",
    "MAX_CORE_INDEX",
    "MAX_CPUS",
    "MAX_GPU_INDEX",
    "MAX_GRACE_S",
    "MAX_ID",
    "MAX_INT",
    "MAX_LEASE_S",
    "MAX_NODES",
    "MAX_NOTIFY_TARGETS",
    "MAX_URL_LENGTH",
    "MIN_CPUS",
    "MIN_LEASE_S",
    "NAME_PATTERN",
    "NOTIFY_DEFAULT_ON",
    "RUN_LIMITS",
    "SCRUBBED_PHASES",
    "TERMINAL_PHASES",
    "ArrayRef",
    "Attempt",
    "Condition",
    "CoreSet",
    "Effective",
    "GpuUsage",
    "Grace",
    "GuardSeconds",
    "Job",
    "JobSpec",
    "JobStatus",
    "LabelExpression",
    "LimitsEnforcement",
    "Member",
    "NotifyPhase",
    "NotifyTarget",
    "ObjectMeta",
    "Phase",
    "PreemptionStatus",
    "Progress",
    "Project",
    "ProjectDefaults",
    "ProjectQuota",
    "ProjectSpec",
    "Resource",
    "Resources",
    "RetryPolicy",
    "RunLimits",
    "Size",
    "StoreId",
    "StoreInt",
    "Strict",
    "Worker",
    "WorkerPhase",
    "WorkerSpec",
    "WorkerStatus",
    "admitting",
    "assign",
    "check_name",
    "check_node_labels",
    "dump",
    "normalise_worker_name",
    "set_condition",
    "utcnow",
]

ADMISSION_KEY = "admission"
# The validation context of what is submitted (see `admitting`).
ADMISSION: dict[str, bool] = {ADMISSION_KEY: True}

# A worker's lease, bounded: under a second its heartbeats cannot keep up with a busy
# broker or a network hiccup (the worker would flap Lost); past an hour a dead worker's
# jobs look Running for longer than anyone waits, and a lease of 1e244 s never ends.
MIN_LEASE_S = 1.0
MAX_LEASE_S = 3600.0
MAX_GPU_INDEX = 1023  # nvidia-smi numbers GPUs from 0; no host has a thousand
# A GPU index as a JSON object key (0 to MAX_GPU_INDEX), for the OpenAPI document.
GPU_INDEX_TEXT = "^(0|[1-9][0-9]{0,2}|10[01][0-9]|102[0-3])$"

# Characters no label should hold: they break terminals, logs and selectors.
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")
# The same rules for the OpenAPI document (JSON Schema), so a client, or a fuzzer, is
# told what admission takes; the validators below enforce them.
_NO_NUL = r"^[^\x00]*$"
_NAME_SCHEMA: dict[str, Any] = {"pattern": NAME_PATTERN}
_USER_SCHEMA: dict[str, Any] = {"pattern": USER_NAME_PATTERN, "maxLength": MAX_USER_NAME}
_MEMBERS_SCHEMA: dict[str, Any] = {
    "items": {"type": "string", "pattern": MEMBER_PATTERN, "maxLength": MAX_USER_NAME + 1}
}
_LABELS_SCHEMA: dict[str, Any] = {
    "propertyNames": {"pattern": r"^[^\x00-\x1f\x7f]+$"},
    "additionalProperties": {"type": "string", "pattern": r"^[^\x00-\x1f\x7f]*$"},
}


def utcnow() -> datetime:
    return datetime.now(UTC)


def admitting(info: ValidationInfo) -> bool:
    """Rules a request must meet, which documents read back from the store are spared.

    A store may hold what an older broker accepted: reading such a job must not fail
    (it would stop every list and every loop that meets it), so rules added since are
    checked only under the ADMISSION context, which admission's parsers pass.
    """
    context = info.context
    return isinstance(context, dict) and bool(context.get(ADMISSION_KEY))


StoreId = Annotated[int, Field(ge=0, le=MAX_ID)]
"""A job id (or event number) as a filter or reference: none past what the store holds."""
StoreInt = Annotated[int, Field(ge=0, le=MAX_INT)]
"""A non-negative count the store can hold (revisions, byte offsets, limits)."""


class Strict(BaseModel):
    # No NaN or infinity anywhere: neither compares, and JSON cannot hold them.
    model_config = ConfigDict(extra="forbid", populate_by_name=True, allow_inf_nan=False)


def assign(model: BaseModel, **values: Any) -> None:
    """Set several fields at once, as `model_copy(update=...)` does, without validation.

    These models do not validate assignment either, but pydantic's `__setattr__` costs
    about 0.4 µs a field; admission and the store set a dozen fields on every new job.
    """
    model.__dict__.update(values)
    model.__pydantic_fields_set__.update(values)


class Condition(Strict):
    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str = ""
    message: str = ""
    last_transition_time: datetime = Field(default_factory=utcnow)


class ArrayRef(Strict):
    """The array a job is a member of (api/arrays.py), and its index there: the server's."""

    id: int = Field(ge=1, le=MAX_ID)
    name: str
    index: int = Field(ge=0)
    # The array's `parallelism`: at most this many of its members bound at once (the
    # scheduler keeps the count); None: no cap.
    parallelism: int | None = Field(default=None, ge=1)
    # The id of its last member: an array's members have consecutive ids (one insert), so
    # the scheduler passes over a full array's queued members in one step.
    last_member: int | None = Field(default=None, ge=1, le=MAX_ID)


class ObjectMeta(Strict):
    name: str | None = Field(default=None, json_schema_extra=_NAME_SCHEMA)
    project: str | None = Field(default=None, json_schema_extra=_NAME_SCHEMA)
    labels: dict[str, str] = Field(default_factory=dict, json_schema_extra=_LABELS_SCHEMA)
    # Set by the server; accepted on input so `job get -o yaml | job apply -f -` round-trips.
    id: int | None = Field(default=None, ge=0, le=MAX_ID)
    uid: str | None = None
    generation: int = Field(default=0, ge=0, le=MAX_INT)
    resource_version: int | None = Field(default=None, ge=0, le=MAX_INT)
    created_at: datetime | None = None
    array: ArrayRef | None = None  # a job's, when it is a member of an array
    # A job's owner: the Unix user the broker knew the caller as (api/identity.py). Set by
    # the broker from the request's identity, never taken from a request body.
    owner: str | None = Field(default=None, json_schema_extra=_USER_SCHEMA)

    @field_validator("name", "project")
    @classmethod
    def _valid_name(cls, value: str | None, info: ValidationInfo) -> str | None:
        return None if value is None else check_name(value, strict=admitting(info))

    @field_validator("owner")
    @classmethod
    def _valid_owner(cls, value: str | None, info: ValidationInfo) -> str | None:
        return value if value is None or not admitting(info) else check_user_name(value)

    @field_validator("labels")
    @classmethod
    def _printable_labels(cls, labels: dict[str, str], info: ValidationInfo) -> dict[str, str]:
        if not admitting(info):
            return labels
        for key, value in labels.items():
            if not key or _CONTROL_RE.search(key) or _CONTROL_RE.search(value):
                raise ValueError(f"label {key!r}: keys must be non-empty; no control characters")
        return labels


def _grace_cap(value: Any) -> Any:
    if isinstance(value, bool):  # a number of seconds, never a flag read as 0 or 1
        raise ValueError("a number of seconds, not true or false")
    if isinstance(value, int | float) and not isinstance(value, bool) and value > MAX_GRACE_S:
        raise ValueError(
            f"{value} s is over the {MAX_GRACE_S} s cap on checkpoint grace "
            "(a stuck checkpoint must not pin a slot)"
        )
    return value


Grace = Annotated[
    float,
    Field(ge=0, le=MAX_GRACE_S, description=f"seconds of SIGTERM grace, capped at {MAX_GRACE_S}"),
    BeforeValidator(_grace_cap),
]


def _whole_seconds(value: Any) -> Any:
    if isinstance(value, bool):  # a number of seconds, never a flag read as 0 or 1
        raise ValueError("a number of seconds, not true or false")
    return value


GuardSeconds = Annotated[
    int,
    Field(ge=1, le=MAX_INT, description="whole seconds, at least 1"),
    BeforeValidator(_whole_seconds),
]
"""A hang guard's or a retention's limit: None (not said) or a positive count of seconds."""


class RunLimits(Strict):
    """The hang guards and the retention, said by a job, a project's defaults, or resolved.

    Each is None when not said; a job's value wins over its project's, field by field
    (verbs/admission.py). Guards end a job Failed with their own reason (controllers/
    guards.py); the TTL removes a finished job (controllers/retention.py).
    """

    max_runtime_s: GuardSeconds | None = None  # wall clock from start (Slurm's --time)
    idle_timeout_s: GuardSeconds | None = None  # no output for this long while Running
    max_pending_s: GuardSeconds | None = None  # queued (Pending) this long
    ttl_after_finished_s: GuardSeconds | None = None  # kept this long after the end


RUN_LIMITS = tuple(RunLimits.model_fields)

# CPUs are counted in thousandths: a job asks for at least one, and no host has more
# than MAX_CPUS (a million CPUs on one worker is a typo).
MIN_CPUS = 0.001
MAX_CPUS = 1 << 20
# The cores a job is pinned to (status.cpuset): Linux numbers at most 8192 of them.
MAX_CORE_INDEX = 8191
CoreSet = Annotated[
    list[Annotated[int, Field(ge=0, le=MAX_CORE_INDEX)]], Field(max_length=MAX_CORE_INDEX + 1)
]


def _size(value: Any) -> Any:
    """A size as written (`40GiB`) into bytes; a number is bytes already."""
    if isinstance(value, bool):
        raise ValueError("a size (40GiB, or a number of bytes), not true or false")
    if isinstance(value, str):
        return parse_size(value)
    return value


Size = Annotated[
    int,
    Field(ge=1, le=MAX_SIZE),
    BeforeValidator(_size),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "integer", "minimum": 1, "maximum": MAX_SIZE},
                {"type": "string", "pattern": SIZE_PATTERN},
            ],
            "description": "bytes, or a size in binary units: 40GiB, 80G, 40960MiB",
        }
    ),
]
"""GPU memory: bytes, accepted as written by people (api/sizes.py)."""


def _memory_only_with_gpus(schema: dict[str, Any]) -> None:
    """Resources' JSON Schema says what `_memory_needs_gpus` does: no gpu_memory without
    gpus, so a request the OpenAPI document allows is never refused for it."""
    schema["anyOf"] = [
        {"properties": {"gpus": {"maximum": 0}, "gpu_memory": {"type": "null"}}},
        {"properties": {"gpus": {"minimum": 1}}, "required": ["gpus"]},
    ]


def _a_number(value: Any) -> Any:
    if isinstance(value, bool):  # a count of CPUs, never a flag read as 0 or 1
        raise ValueError("a number of CPUs (4, 0.5), not true or false")
    return value


class Resources(Strict):
    """What a job takes on its worker: GPUs, or else one CPU slot (the two pools); and
    the CPUs and memory it names, on either.

    A job asking for GPUs takes those GPUs and no slot; a CPU-only job takes one slot and
    no GPU. So CPU jobs never keep a GPU job from a worker whose GPUs are free. `cpus` and
    `memory` come on top: a job naming them is placed where that much of the worker's
    inventory is free and holds it while it runs; a job naming none holds none (best
    effort, as a Kubernetes pod without requests).
    """

    model_config = ConfigDict(json_schema_extra=_memory_only_with_gpus)
    cpus: Annotated[
        float | None,
        Option(
            "--cpus",
            "CPUs the job is placed by and holds, {minimum} to {maximum} (0.5 is half "
            "of one) [default: none held].",
            kind="number",
            metavar="N",
        ),
        BeforeValidator(_a_number),
    ] = Field(default=None, ge=MIN_CPUS, le=MAX_CPUS)
    memory: Annotated[
        Size | None,
        Option(
            "--memory",
            "Memory the job is placed by and holds: 32GiB, 512M [default: none held].",
            kind="size",
            metavar="SIZE",
        ),
    ] = None
    gpus: Annotated[
        int,
        Option(
            "--gpus",
            "GPUs the job takes, {minimum} to {maximum} (then no CPU slot).",
            kind="integer",
            metavar="N",
        ),
    ] = Field(default=0, ge=0, le=64)
    # The least memory each of its GPUs must have free.
    gpu_memory: Annotated[
        Size | None,
        Option(
            "--gpu-memory",
            "Memory each of its GPUs must have free: 40GiB, 80G, 40960MiB.",
            kind="size",
            metavar="SIZE",
        ),
    ] = None

    @property
    def slots(self) -> int:
        """The CPU slots the job takes: one for a CPU-only job, none for a GPU job."""
        return 0 if self.gpus else 1

    @property
    def millicpus(self) -> int:
        """The CPUs it holds in thousandths (whole numbers add up exactly); 0: none."""
        return round(self.cpus * 1000) if self.cpus else 0

    @property
    def memory_bytes(self) -> int:
        return self.memory or 0

    @field_validator("gpu_memory")
    @classmethod
    def _memory_needs_gpus(cls, memory: int | None, info: ValidationInfo) -> int | None:
        if memory is not None and not info.data.get("gpus"):
            raise ValueError("gpu_memory is memory per GPU: ask for gpus as well")
        return memory


_LABEL_KEY_SCHEMA: dict[str, Any] = {"pattern": LABEL_KEY_PATTERN, "maxLength": MAX_KEY_LENGTH}
_LABEL_VALUE_SCHEMA: dict[str, Any] = {
    "type": "string",
    "pattern": LABEL_VALUE_PATTERN,
    "maxLength": MAX_VALUE_LENGTH,
}
# Worker labels and node selectors: Kubernetes' label syntax (api/labels.py).
_NODE_LABELS_SCHEMA: dict[str, Any] = {
    "propertyNames": _LABEL_KEY_SCHEMA,
    "additionalProperties": _LABEL_VALUE_SCHEMA,
}
_MAX_SELECTOR_TERMS = 64
# A worker's name as a pin: any case (worker names are lower-cased hostnames).
_WORKER_PIN = r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$"
_WORKER_PIN_RE = re.compile(_WORKER_PIN)


def check_node_labels(labels: dict[str, str]) -> dict[str, str]:
    for key, value in labels.items():
        check_label_value(check_label_key(key), value)
    return labels


def _values_by_operator(schema: dict[str, Any]) -> None:
    """LabelExpression's JSON Schema says what `_values_for_operator` does."""
    schema["anyOf"] = [
        {
            "properties": {"operator": {"enum": ["In", "NotIn"]}, "values": {"minItems": 1}},
            "required": ["values"],
        },
        {
            "properties": {
                "operator": {"enum": ["Exists", "DoesNotExist"]},
                "values": {"maxItems": 0},
            }
        },
    ]


class LabelExpression(Strict):
    """One of Kubernetes' matchExpressions on worker labels: `In` and `NotIn` take
    values (a NotIn also holds where the key is absent), `Exists` and `DoesNotExist`
    none."""

    model_config = ConfigDict(json_schema_extra=_values_by_operator)
    key: str = Field(json_schema_extra=_LABEL_KEY_SCHEMA)
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: list[str] = Field(
        default_factory=list,
        max_length=_MAX_SELECTOR_TERMS,
        json_schema_extra={"items": _LABEL_VALUE_SCHEMA},
    )

    @field_validator("key")
    @classmethod
    def _valid_key(cls, key: str) -> str:
        return check_label_key(key)

    @model_validator(mode="after")
    def _values_for_operator(self) -> LabelExpression:
        for value in self.values:
            check_label_value(self.key, value)
        if self.operator in ("In", "NotIn") and not self.values:
            raise ValueError(f"{self.key}: {self.operator} needs at least one value")
        if self.operator in ("Exists", "DoesNotExist") and self.values:
            raise ValueError(f"{self.key}: {self.operator} takes no values")
        return self


# Bounds of a retry policy (OpenAPI says them; admission refuses past them).
MAX_RETRIES = 100
MAX_BACKOFF_S = 86_400.0  # a day between two attempts at most
MAX_EXIT_CODES = 256  # every exit code once


def _seconds(value: Any) -> Any:
    if isinstance(value, bool):  # a number of seconds, never a flag read as 0 or 1
        raise ValueError("a number of seconds, not true or false")
    return value


BackoffSeconds = Annotated[
    float,
    Field(ge=0, le=MAX_BACKOFF_S, description=f"seconds, 0 to {MAX_BACKOFF_S:g}"),
    BeforeValidator(_seconds),
]


ExitCode = Annotated[int, Field(ge=0, le=255, description="an exit code; a signal N is 128+N")]


class RetryPolicy(Strict):
    """When a failed attempt is run again (controllers/retries.py), Kubernetes' backoffLimit
    and SkyPilot's recover_on_exit_codes in one: the same job, queued again after an
    exponential backoff, `limit` times at most. Preempted and cancelled jobs are never
    retried; a job that a guard failed (MaxRuntimeExceeded, ...) neither."""

    limit: Annotated[
        int,
        Option(
            "--retries",
            "Run it again up to N times ({minimum} to {maximum}) when it fails.",
            kind="integer",
            metavar="N",
            parameter="retries",
        ),
    ] = Field(default=0, ge=0, le=MAX_RETRIES)
    # The wait before retry n is backoff_s * 2**(n-1), at most backoff_max_s.
    backoff_s: Annotated[
        BackoffSeconds, NoOption("in a manifest: spec.retry.backoff_s (default 30)")
    ] = 30.0
    backoff_max_s: Annotated[
        BackoffSeconds, NoOption("in a manifest: spec.retry.backoff_max_s (default 600)")
    ] = 600.0
    # Retried only on these exit codes (a signal N counts as 128+N); None: any failure.
    on_exit_codes: Annotated[
        list[ExitCode] | None, NoOption("in a manifest: spec.retry.on_exit_codes")
    ] = Field(default=None, max_length=MAX_EXIT_CODES)
    # Retried too when its worker was lost (lease expired past the lost timeout, or the
    # host restarted under it); off by default: a partitioned worker may still run it.
    on_lost: Annotated[bool, NoOption("in a manifest: spec.retry.on_lost")] = False

    def wait_s(self, retry: int) -> float:
        """The backoff before retry number `retry` (1 for the first): doubling, capped."""
        if retry < 1:
            return 0.0
        return min(self.backoff_s * 2.0 ** min(retry - 1, 64), self.backoff_max_s)


# Each field says how `job submit` and the MCP tool take it (api/field_options.py): one
# edit adds a field to the document, the command line and the MCP tool alike.
NotifyPhase = Literal["Running", "Succeeded", "Failed", "Preempted", "Cancelled", "Lost"]
NOTIFY_DEFAULT_ON: tuple[NotifyPhase, ...] = ("Succeeded", "Failed", "Preempted", "Cancelled")
MAX_NOTIFY_TARGETS = 8
MAX_URL_LENGTH = 2048
# No ASCII control character or space: read alike by Python and by JSON Schema's ECMA
# regular expressions (whose `\s` differ).
_URL = r"^https?://[^\x00-\x20\x7f]+$"
_URL_RE = re.compile(r"https?://[^\x00-\x20\x7f]+")


class NotifyTarget(Strict):
    """Where a job's phase changes are posted (broker/notify/): a webhook URL, a secret.

    `url` and `secret` are secrets: every read shows them masked (api/secrets.py).
    """

    url: str = Field(min_length=3, max_length=MAX_URL_LENGTH, json_schema_extra={"pattern": _URL})
    on: list[NotifyPhase] = Field(
        default_factory=lambda: list(NOTIFY_DEFAULT_ON), min_length=1, max_length=6
    )
    format: Literal["slack", "discord", "json"] = "json"
    # The key of an HMAC-SHA256 of each body (X-Jobd-Signature); else the broker's
    # --webhook-secret, if any.
    secret: str | None = Field(default=None, min_length=1, max_length=256)

    @field_validator("url")
    @classmethod
    def _http_url(cls, url: str) -> str:
        """An http(s) URL; or the mask a read shows in its place, which the schema does
        not publish: applied back, the stored URL stays, and as a new job's URL it is
        refused (controllers/verbs/admission.refuse_masks)."""
        if url != "***" and not _URL_RE.fullmatch(url):
            raise ValueError("must be an http:// or https:// URL, without spaces")
        return url


_BLANK = "\t\n\v\f\r "  # what an empty program may hold, as the schema's pattern says


class JobSpec(Strict):
    command: Annotated[
        list[str],
        NoOption("the verb's own argument: COMMAND after --, or --shell; the MCP `command`"),
    ] = Field(
        min_length=1,
        json_schema_extra={
            "items": {"type": "string", "pattern": _NO_NUL},
            # JSON Schema's `items` holds only past `prefixItems`: the first word says both.
            # Blank is ASCII's spaces only (_BLANK): Python's and ECMA's `\s` differ.
            "prefixItems": [{"type": "string", "pattern": r"^[^\x00]*[^\x00\t\n\v\f\r ][^\x00]*$"}],
        },
    )
    # Absolute (admission refuses a relative one: verbs/admission.refuse_relative_cwd).
    cwd: Annotated[
        str | None,
        NoOption("made absolute from where it is said: --cwd (default .), the MCP `cwd`"),
    ] = Field(default=None, json_schema_extra={"pattern": r"^(/[^\x00]*)?$"})
    env: Annotated[
        dict[str, str],
        Option("--env", "Environment variables of the job.", kind="pairs", metavar="K=V"),
    ] = Field(
        default_factory=dict,
        json_schema_extra={
            "propertyNames": {"pattern": r"^[^=\x00]+$"},
            "additionalProperties": {"type": "string", "pattern": _NO_NUL},
        },
    )
    priority: Annotated[
        int | None,
        Option(
            "--priority", "Priority, higher runs first [default: the project's].", kind="integer"
        ),
    ] = Field(default=None, ge=0, le=1_000_000)
    preemptible: Annotated[
        bool | None,
        Option(
            "--preemptible",
            "Whether higher priority work may preempt it [default: the project's].",
            kind="switch",
        ),
    ] = None
    checkpoint_grace_s: Annotated[
        Grace | None,
        Option(
            "--checkpoint-grace",
            "Seconds from SIGTERM to SIGKILL on preemption, at most {maximum}.",
            kind="number",
            metavar="S",
        ),
    ] = None
    resources: Resources = Field(default_factory=Resources)
    # > 1: a multi-host job (a gang): this many members, each on a different worker, each
    # with `resources` (nodes 2, gpus 8: 16 GPUs), placed all at once or not at all, with
    # one life for the group (docs/concepts.md, "Jobs across several hosts").
    nodes: Annotated[
        int,
        Option(
            "--nodes",
            "Run on this many workers at once, one member each with the resources asked "
            "(a multi-host job), at most {maximum}.",
            kind="integer",
            metavar="N",
        ),
    ] = Field(default=1, ge=1, le=MAX_NODES)
    # Where it may run (controllers/eligibility.py): workers whose labels hold every
    # pair, and every expression; the one worker named.
    node_selector: Annotated[
        dict[str, str],
        Option(
            "--selector",
            "Run only on a worker with this label (gpu.model=A100, site=lab2); all must hold.",
            kind="pairs",
            metavar="K=V",
        ),
    ] = Field(
        default_factory=dict, max_length=_MAX_SELECTOR_TERMS, json_schema_extra=_NODE_LABELS_SCHEMA
    )
    node_affinity: Annotated[
        list[LabelExpression],
        NoOption("a manifest's: Kubernetes matchExpressions (In, NotIn, Exists, DoesNotExist)"),
    ] = Field(default_factory=list, max_length=_MAX_SELECTOR_TERMS)
    worker: Annotated[
        str | None,
        Option("--worker", "Run only on this worker (a pin).", metavar="NAME"),
    ] = Field(default=None, json_schema_extra={"pattern": _WORKER_PIN})
    # The run limits (RunLimits, declared here again to keep the document's order).
    max_runtime_s: Annotated[
        GuardSeconds | None,
        Option(
            "--max-runtime",
            "Fail the job (SIGTERM, its grace) once it has run this long.",
            kind="duration",
        ),
    ] = None
    idle_timeout_s: Annotated[
        GuardSeconds | None,
        Option(
            "--idle-timeout",
            "Fail the job (SIGTERM, its grace) once it has printed nothing for this long.",
            kind="duration",
        ),
    ] = None
    max_pending_s: Annotated[
        GuardSeconds | None,
        Option("--max-pending", "Fail the job if queued this long.", kind="duration"),
    ] = None
    ttl_after_finished_s: Annotated[
        GuardSeconds | None,
        Option(
            "--ttl-after-finished",
            "Remove the job, its logs and events this long after it ends [default: the "
            "project's, else the broker's].",
            kind="duration",
        ),
    ] = None
    depends_on: Annotated[
        list[int | str],
        Option(
            "--depends-on",
            "Start only after these jobs (ids, or names in the project) succeed.",
            kind="refs",
            metavar="ID",
        ),
    ] = Field(
        default_factory=list,
        json_schema_extra={
            "items": {
                "anyOf": [{"type": "integer", "minimum": 1, "maximum": MAX_ID}, {"type": "string"}]
            }
        },
    )
    notify: Annotated[
        list[NotifyTarget],
        Option(
            "--notify",
            "Post the job's end (Succeeded, Failed, Preempted, Cancelled) to this webhook "
            "URL, as JSON.",
            kind="urls",
            metavar="URL",
        ),
    ] = Field(default_factory=list, max_length=MAX_NOTIFY_TARGETS)
    depends_on_any_exit: Annotated[
        bool,
        Option("--depends-on-any-exit", "Start once the dependencies end, however.", kind="flag"),
    ] = False
    # None: a failed job stays failed (RetryPolicy, controllers/retries.py).
    retry: RetryPolicy | None = None
    # Beyond the seed, opt-in: resubmit automatically after a preemption whose checkpoint
    # completed (see docs/preemption.md).
    auto_resume: Annotated[
        bool,
        Option(
            "--auto-resume",
            "Resubmit it once after a preemption whose checkpoint completed.",
            kind="flag",
        ),
    ] = False

    # What no OS can execute is refused here, at admission, rather than crash the agent
    # that tries: argv, cwd and the environment are C strings (no NUL), and an
    # environment entry is KEY=VALUE (a key cannot hold `=`).
    @field_validator("command")
    @classmethod
    def _command_words(cls, value: list[str], info: ValidationInfo) -> list[str]:
        if not value[0].strip(_BLANK):
            raise ValueError("the program (first word) must not be empty")
        if not admitting(info):
            return value
        for i, word in enumerate(value):
            if "\x00" in word:
                raise ValueError(f"word {i} holds a NUL byte, which no program can be given")
        return value

    @field_validator("depends_on")
    @classmethod
    def _parents_are_ids_or_names(cls, refs: list[int | str]) -> list[int | str]:
        for ref in refs:
            if isinstance(ref, int) and not 1 <= ref <= MAX_ID:
                raise ValueError(f"{ref} is not a job id (an integer, 1 to {MAX_ID})")
        return refs

    @field_validator("node_selector")
    @classmethod
    def _selector_labels(cls, selector: dict[str, str]) -> dict[str, str]:
        return check_node_labels(selector)

    @field_validator("worker")
    @classmethod
    def _worker_name(cls, value: str | None) -> str | None:
        if value is not None and not _WORKER_PIN_RE.fullmatch(value):
            raise ValueError(f"{value!r} is not a worker name (letters, digits, '.', '_', '-')")
        return None if value is None else value.lower()  # as workers' names are

    @field_validator("cwd")
    @classmethod
    def _cwd_is_a_path(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None and admitting(info) and "\x00" in value:
            raise ValueError("holds a NUL byte, which no path can")
        return value

    @field_validator("env")
    @classmethod
    def _env_entries(cls, env: dict[str, str], info: ValidationInfo) -> dict[str, str]:
        if not admitting(info):
            return env
        for key, value in env.items():
            if not key or "=" in key or "\x00" in key:
                raise ValueError(
                    f"{key!r}: a variable's name must be non-empty, without '=' or NUL"
                )
            if "\x00" in value:
                raise ValueError(f"{key}: the value holds a NUL byte, which no environment can")
        return env


class Effective(RunLimits):
    """Values resolved from the job, its project and the global defaults.

    The run limits (RunLimits) are the job's, else its project's; None: none applies
    (for the TTL, the broker's `--finished-job-ttl` then does).
    """

    priority: int = 0
    preemptible: bool = False
    checkpoint_grace_s: float | None = None  # None: the worker's default applies
    # The project's `secret_env_keys`, beyond the defaults (api/secrets.py); None: none.
    secret_env_keys: list[str] | None = None


# A metric's value as status.progress keeps it (api/progress.py says which are kept).
MetricValue = int | float | str


class Progress(Strict):
    """What the workload last said of its progress (`jobd-progress` lines), as the broker
    keeps it: `fraction` is step/total, `eta_s` the rest of the steps at the rate seen
    since the run's first report (`first_step` at `first_at`); None while unknown."""

    step: int | float
    total: int | float | None = None
    fraction: float | None = None
    eta_s: int | None = None
    metrics: dict[str, MetricValue] = Field(default_factory=dict)
    updated_at: datetime
    first_step: int | float
    first_at: datetime


class PreemptionStatus(Strict):
    candidate_job: int | None = None
    reason: Literal["sweeper", "manual", "blockers", "drain", "reclaim"] = "manual"
    requested_at: datetime = Field(default_factory=utcnow)
    checkpoint_complete: bool = False


MAX_ATTEMPTS_KEPT = 20  # status.attempts keeps the newest of them


class Attempt(Strict):
    """One run of a job that has a retry policy, as it ended (status.attempts)."""

    attempt: int  # its fencing number (status.attempt while it ran)
    worker: str | None = None
    exit_code: int | None = None
    exit_signal: int | None = None
    reason: str | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None


class Member(Strict):
    """One member (rank) of a multi-host job, as `status.members` lists them: where it
    runs, and how far it got. Rank 0 is the master (`JOBD_MASTER_ADDR` is its address)."""

    rank: int = Field(ge=0, lt=MAX_NODES)
    worker: str
    # The worker's advertised address when the gang was bound (its `status.address`).
    address: str | None = None
    phase: Phase = Phase.SCHEDULED
    gpus: list[int] = Field(default_factory=list)
    cpuset: CoreSet | None = None
    exit_code: int | None = None
    exit_signal: int | None = None
    reason: str | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    # It printed the checkpoint sentinel in this run's grace (preemption): the job's
    # `preemption.checkpoint_complete` holds once every member's does.
    checkpoint_complete: bool = False
    # Where this member's worker put its checkpoints (its `started`), and the newest
    # checkpoint it wrote (its `complete`): `job resume` points rank r's RESUME_FROM there.
    checkpoint_dir: str | None = None
    checkpoint_latest: str | None = None


class JobStatus(Strict):
    desired_phase: Phase = Phase.RUNNING
    phase: Phase = Phase.PENDING
    # What the worker is asked to stop the job for (SIGTERM, grace, SIGKILL): a
    # preemption, a cancel, or a hang guard (controllers/guards.py).
    signal: Literal["preempt", "cancel", "timeout"] | None = None
    worker: str | None = None
    # The run's fencing number: bumped by every bind; every worker report carries it.
    attempt: int = 0
    # Jobs with spec.retry: each run's end (the newest MAX_ATTEMPTS_KEPT), how often it
    # was queued again, until when it waits out its backoff (not queued before), and the
    # checkpoint the next run resumes from (its RESUME_FROM).
    attempts: list[Attempt] = Field(default_factory=list)
    retries: int = 0
    retry_at: datetime | None = None
    resume_from: str | None = None
    gpus: list[int] = Field(default_factory=list)
    nominated_worker: str | None = None
    conditions: list[Condition] = Field(default_factory=list)
    observed_generation: int = 0
    effective: Effective = Field(default_factory=Effective)
    parents: list[int] = Field(default_factory=list)  # depends_on resolved to job ids
    dependencies_met: bool = True
    preemption: PreemptionStatus | None = None
    progress: Progress | None = None
    exit_code: int | None = None
    exit_signal: int | None = None
    reason: str | None = None
    message: str | None = None
    queued_at: datetime | None = None
    scheduled_at: datetime | None = None
    started_at: datetime | None = None
    stopping_at: datetime | None = None
    finished_at: datetime | None = None
    lost_at: datetime | None = None
    checkpoint_dir: str | None = None
    checkpoint_latest: str | None = None  # the worker's pick for RESUME_FROM at exit
    resumed_by: int | None = None
    # The cores this run's processes are pinned to, as its worker's `started` says; None:
    # not pinned (a job naming no cpus, or a worker that pins none).
    cpuset: CoreSet | None = None
    # A multi-host job's members, by rank, from its bind (empty for a job of one node);
    # `worker`, `gpus` and `cpuset` above are rank 0's. `master_port`: the free port rank
    # 0's agent chose on its host (JOBD_MASTER_PORT), None until it has.
    members: list[Member] = Field(default_factory=list)
    master_port: int | None = Field(default=None, ge=1, le=65535)
    # Which member ended the run of a multi-host job (its exit is exit_code above).
    failed_rank: int | None = None
    # A retried multi-host job: the checkpoint each rank's member left in a run (its
    # newest file), by rank as text; that rank's next run resumes from it (its
    # RESUME_FROM, as `job resume` gives each rank RESUME_FROM_RANK_<r>). A rank without
    # one resumes from `resume_from`, rank 0's.
    resume_from_ranks: dict[str, str] = Field(default_factory=dict)
    # A queued multi-host job that preemption is freeing room for: every worker room is
    # held on for it, rank 0's first (`nominated_worker` is that first one, so a gang is
    # found among the nominated jobs as a job of one node is). Empty for a job of one node.
    nominated_workers: list[str] = Field(default_factory=list)

    @property
    def ready(self) -> bool:
        """Free to queue, whatever the phase: its parents ended (`dependencies_met`) and
        no retry backoff runs (`retry_at`). The store's `ready` column, the view's queue,
        a create's own placement and `job explain` all read it from here."""
        return self.dependencies_met and self.retry_at is None


class Job(Strict):
    api_version: Literal["jobd/v1"] = Field(default="jobd/v1", alias="apiVersion")
    kind: Literal["Job"] = "Job"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: JobSpec
    status: JobStatus = Field(default_factory=JobStatus)

    @property
    def id(self) -> int:
        assert self.metadata.id is not None, "job has not been stored yet"
        return self.metadata.id

    @property
    def project(self) -> str:
        return self.metadata.project or DEFAULT_PROJECT

    @property
    def ref(self) -> str:
        return f"{self.project}/{self.metadata.name}"

    @property
    def auto_resumes(self) -> bool:
        """Whether auto_resume continues this job (or has, `status.resumed_by`): preempted
        once its checkpoint completed, under `spec.auto_resume`."""
        preemption = self.status.preemption
        return (
            self.status.phase == Phase.PREEMPTED
            and self.spec.auto_resume
            and preemption is not None
            and preemption.checkpoint_complete
        )

    def evolve(self) -> Job:
        """A copy whose status may be changed; spec and metadata are shared, not copied.

        Transitions only ever write status (and, when a job ends, replace its spec by
        one whose secrets are masked: a new object, the shared one untouched), and a deep
        copy of the whole document is the largest cost of a write on the hot paths.
        """
        # Through pydantic's core and back: several times faster than copy.deepcopy. A
        # field at its default is not carried but made afresh (most of a status's fields,
        # a gang's among them, are at theirs): 131 k instructions a copy, 117 k.
        dumped = self.status.model_dump(round_trip=True, exclude_defaults=True)
        status = JobStatus.model_validate(dumped)
        return self.model_copy(update={"status": status})


class ProjectDefaults(RunLimits):
    preemptible: bool | None = None
    checkpoint_grace_s: Grace | None = None


class ProjectQuota(Strict):
    """What a project's running jobs may hold at once, in all (Slurm's `GrpTRES`); a
    dimension not said is not limited. With `ProjectSpec.borrow`, idle capacity beyond
    it may be used, and is reclaimed (preempted) when a project within its quota waits."""

    gpus: int | None = Field(default=None, ge=0, le=MAX_INT)
    cpus: float | None = Field(default=None, ge=0, le=MAX_CPUS)
    memory: Size | None = None
    running_jobs: int | None = Field(default=None, ge=0, le=MAX_INT)


class ProjectSpec(Strict):
    priority: int = Field(default=0, ge=0, le=1_000_000)
    # Who may use the project: Unix user names, and `@group` names (api/identity.py).
    # Members see and act on its jobs and change their own; admins change any of them.
    members: list[str] = Field(
        default_factory=list, max_length=MAX_MEMBERS, json_schema_extra=_MEMBERS_SCHEMA
    )
    admins: list[str] = Field(
        default_factory=list, max_length=MAX_MEMBERS, json_schema_extra=_MEMBERS_SCHEMA
    )
    # Whether a job of this project may run as root (its owner root); refused otherwise.
    allow_root: bool = False
    quota: ProjectQuota | None = None
    max_running_per_user: int | None = Field(default=None, ge=0, le=MAX_INT)
    # Whether the project may run past its quota on capacity nobody else is using.
    borrow: bool = True
    # The project's weight in fair share: its target share of the usage is its shares
    # over the sum of the shares of the projects using the machines.
    shares: int = Field(default=1, ge=1, le=1_000_000)
    defaults: ProjectDefaults = Field(default_factory=ProjectDefaults)
    # Globs (fnmatch, case-insensitive) of the env keys whose values are secret in this
    # project's jobs, beyond the defaults every project has (api/secrets.py).
    secret_env_keys: list[str] = Field(
        default_factory=list,
        max_length=MAX_PATTERNS,
        json_schema_extra={
            "items": {
                "type": "string",
                "minLength": 1,
                "maxLength": MAX_PATTERN_LENGTH,
                "pattern": r"^[^\x00-\x1f\x7f]*[^\x00-\x20\x7f][^\x00-\x1f\x7f]*$",
            }
        },
    )

    @field_validator("secret_env_keys")
    @classmethod
    def _valid_patterns(cls, patterns: list[str], info: ValidationInfo) -> list[str]:
        return check_patterns(patterns) if admitting(info) else patterns

    @field_validator("members", "admins")
    @classmethod
    def _valid_members(cls, members: list[str], info: ValidationInfo) -> list[str]:
        return [check_member(member) for member in members] if admitting(info) else members


class Project(Strict):
    api_version: Literal["jobd/v1"] = Field(default="jobd/v1", alias="apiVersion")
    kind: Literal["Project"] = "Project"
    metadata: ObjectMeta
    spec: ProjectSpec = Field(default_factory=ProjectSpec)

    @property
    def name(self) -> str:
        assert self.metadata.name is not None
        return self.metadata.name


class LimitsEnforcement(Strict):
    """How a worker holds a job to the CPUs and memory it names (worker/limits.py): its
    cores pinned by affinity (or not at all), its memory capped by a cgroup the worker
    makes (v2, or the v1 memory controller) or by its shim watching the RSS of its
    processes."""

    cpu: Literal["affinity", "none"] = "none"
    memory: Literal["cgroup-v2", "cgroup-v1", "rss-watch"] = "rss-watch"


class WorkerSpec(Strict):
    slots: int = Field(default=1, ge=1, le=1024)
    gpus: list[int] = Field(
        default_factory=list,
        json_schema_extra={
            "items": {"type": "integer", "minimum": 0, "maximum": MAX_GPU_INDEX},
            "uniqueItems": True,
        },
    )
    # Each GPU's memory in bytes, by index: declared (`--gpus 0:24GiB`) or detected
    # (NVML, nvidia-smi). A GPU not here has memory unknown: it takes only jobs that
    # ask for no gpu_memory.
    gpu_memory: dict[int, Size] = Field(
        default_factory=dict, json_schema_extra={"propertyNames": {"pattern": GPU_INDEX_TEXT}}
    )
    lease_duration_s: float = Field(
        default=15.0,
        gt=0,
        description=f"seconds; {MIN_LEASE_S:g} to {MAX_LEASE_S:g} (why: api/models.py)",
        json_schema_extra={"minimum": MIN_LEASE_S, "maximum": MAX_LEASE_S},
    )
    # `job cordon`: no new job is placed here; what runs goes on (Kubernetes'
    # `spec.unschedulable`). Set by users, kept when the worker registers again.
    cordoned: bool = False
    # What jobs naming CPUs and memory may hold here (the inventory: detected less the
    # reserve, or declared; daemon/inventory.py). None: an agent that says none (older):
    # only jobs naming neither go there.
    cpus: float | None = Field(default=None, ge=0, le=MAX_CPUS)
    memory: StoreInt | None = Field(default=None, le=MAX_SIZE)
    # Labels a job's node_selector and node_affinity match: declared and detected.
    labels: dict[str, str] = Field(default_factory=dict, json_schema_extra=_NODE_LABELS_SCHEMA)
    # How this worker enforces a job's cpus and memory, detected at its start. None: an
    # agent that says none (older): it enforces neither.
    enforcement: LimitsEnforcement | None = None
    # A job is placed here only if its cwd is under one of these; none: any cwd.
    mount_roots: list[str] = Field(
        default_factory=list,
        max_length=_MAX_SELECTOR_TERMS,
        json_schema_extra={"items": {"type": "string", "pattern": r"^/[^\x00]*$"}},
    )

    @property
    def millicpus(self) -> int:
        return round(self.cpus * 1000) if self.cpus else 0

    @field_validator("labels")
    @classmethod
    def _node_labels(cls, labels: dict[str, str], info: ValidationInfo) -> dict[str, str]:
        return check_node_labels(labels) if admitting(info) else labels

    @field_validator("mount_roots")
    @classmethod
    def _absolute_roots(cls, roots: list[str], info: ValidationInfo) -> list[str]:
        if admitting(info):
            for root in roots:
                if not root.startswith("/") or "\x00" in root:
                    raise ValueError(f"{root!r}: a mount root is an absolute path, without NUL")
        return roots

    @field_validator("gpus")
    @classmethod
    def _gpu_indices(cls, gpus: list[int], info: ValidationInfo) -> list[int]:
        # Under admission only: a stored worker row may hold what an older broker took.
        if admitting(info):
            if any(not 0 <= g <= MAX_GPU_INDEX for g in gpus):
                raise ValueError(
                    f"GPU indices must not be negative or past {MAX_GPU_INDEX}: {gpus}"
                )
            if len(set(gpus)) != len(gpus):
                raise ValueError(f"GPU indices must not repeat: {gpus}")
        return gpus

    @field_validator("gpu_memory")
    @classmethod
    def _memory_of_own_gpus(cls, memory: dict[int, int], info: ValidationInfo) -> dict[int, int]:
        # Memory of a GPU the worker does not hand out is dropped, not refused: the agent
        # builds both from one inventory, and no JSON Schema can say the keys are in `gpus`.
        listed = set(info.data.get("gpus") or [])
        return {gpu: size for gpu, size in memory.items() if gpu in listed}

    @field_validator("lease_duration_s")
    @classmethod
    def _lease_in_range(cls, lease: float, info: ValidationInfo) -> float:
        if admitting(info) and not MIN_LEASE_S <= lease <= MAX_LEASE_S:
            raise ValueError(
                f"{lease:g} s is outside {MIN_LEASE_S:g} to {MAX_LEASE_S:g} s: a shorter lease "
                "flaps Lost, a longer one leaves a dead worker's jobs unnoticed"
            )
        return lease


class GpuUsage(Strict):
    """One GPU as its worker's NVML read it for the newest heartbeat."""

    memory_used: StoreInt = Field(description="bytes in use, by any process")
    utilization: float | None = Field(
        default=None, ge=0, le=1, description="busy share of NVML's last sample period"
    )


class WorkerStatus(Strict):
    phase: WorkerPhase = WorkerPhase.READY
    last_renewal: datetime = Field(default_factory=utcnow)
    jobs: list[int] = Field(default_factory=list)
    hostname: str | None = None
    runner: str | None = None
    registered_at: datetime = Field(default_factory=utcnow)
    # Memory in use on each GPU by processes jobd did not start, in bytes (NVML, with the
    # heartbeat); placement counts it as taken. Empty where nothing measures it.
    gpu_memory_foreign: dict[int, StoreInt] = Field(default_factory=dict)
    # Each GPU's memory in use and utilisation (NVML, with the newest heartbeat). Kept in
    # the broker's memory, never in the store, and filled in when a worker is read; empty
    # where nothing measures it (a declared inventory: its totals are in spec.gpu_memory).
    gpu_usage: dict[int, GpuUsage] = Field(default_factory=dict)
    # DiskFull while the disk of the worker's state directory is full (no job is placed
    # here meanwhile: controllers/worker_disk.py).
    conditions: list[Condition] = Field(default_factory=list)
    # Which agent holds the lease: the instance id it keeps in its state directory, and
    # the fencing epoch, bumped by every registration (controllers/verbs/worker_lease.py).
    # Another instance is refused while this one's lease runs. None: an agent that says none.
    instance: str | None = None
    epoch: StoreInt = 0
    # The address multi-host jobs reach this host at (`--advertise-address`; default:
    # the address its agent reaches the broker from, as the broker saw it).
    address: str | None = Field(default=None, max_length=253)
    # Whom the worker runs jobs as: `owner` (a root worker: each job as its owner), else
    # the worker's own user, which runs every job (worker/owners.py). None: not said.
    runs_as: str | None = Field(
        default=None, max_length=MAX_USER_NAME, json_schema_extra={"pattern": RUNS_AS_PATTERN}
    )
    # The owners whose jobs may be placed here: the users its host knows (within its
    # --allow-user). None: any owner (checked at launch; an older agent says nothing).
    users: list[str] | None = Field(
        default=None, max_length=MAX_WORKER_USERS, json_schema_extra={"items": _USER_SCHEMA}
    )


class Worker(Strict):
    api_version: Literal["jobd/v1"] = Field(default="jobd/v1", alias="apiVersion")
    kind: Literal["Worker"] = "Worker"
    metadata: ObjectMeta
    spec: WorkerSpec = Field(default_factory=WorkerSpec)
    status: WorkerStatus = Field(default_factory=WorkerStatus)

    @property
    def name(self) -> str:
        assert self.metadata.name is not None
        return self.metadata.name


Resource = Job | Project | Worker


def dump(obj: BaseModel) -> dict[str, Any]:
    """The JSON form users see: camelCase apiVersion, no None noise in metadata."""
    return obj.model_dump(mode="json", by_alias=True, exclude_none=True)


def set_condition(
    status: JobStatus | WorkerStatus,
    type_: str,
    value: bool,
    reason: str = "",
    message: str = "",
    *,
    now: datetime | None = None,
) -> None:
    """Upsert a condition; last_transition_time moves only when the status flips.

    `now` is the transition's time (the controllers' clock); the wall clock otherwise.
    """
    new_status: Literal["True", "False"] = "True" if value else "False"
    at = now or utcnow()
    for cond in status.conditions:
        if cond.type == type_:
            if cond.status != new_status:
                cond.last_transition_time = at
            cond.status, cond.reason, cond.message = new_status, reason, message
            return
    status.conditions.append(
        Condition(
            type=type_, status=new_status, reason=reason, message=message, last_transition_time=at
        )
    )
