"""Every setting of `jobd broker`, `jobd worker` and `jobd dev`, each declared once.

A setting is one dataclass field whose metadata carries its flag, environment variable,
help and click type; its default is the field's. From these declarations come the
command's click options (click reads the flag, then the environment variable, then the
default: CONTRACT.md §2) and the typed object the command receives, so adding a setting
is one field here and its use in `assembly.py`. `jobd dev` takes the broker's and the
worker's settings together.
"""

from __future__ import annotations

import dataclasses
import os
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from jobd.api.addresses import check_address
from jobd.api.identity import check_user_name
from jobd.cli.durations import Duration
from jobd.daemon.inventory import (
    DEFAULT_RESERVE_CPUS,
    DEFAULT_RESERVE_MEMORY,
    mount_roots_of,
    parse_labels,
    size_option,
)
from jobd.daemon.worker_host import Gpus, parse_gpus, worker_name

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = [
    "NAME_GIVEN",
    "AgentConnection",
    "BrokerOptions",
    "OutputOptions",
    "WorkerOptions",
    "default_data_dir",
    "environment_variables",
    "options",
    "read",
]

F = TypeVar("F", bound=Callable[..., Any])
S = TypeVar("S", bound="DataclassInstance")
_FLAG = "jobd.setting"
NAME_GIVEN = "jobd.worker_name_given"  # ctx.meta: the --name as given, when it changed


@dataclass(frozen=True)
class _Flag:
    """How one setting is given: its flag, environment variable, help and click type."""

    flag: str
    env: str
    help: str
    type: Any = None
    is_flag: bool = False
    callback: Callable[[click.Context, click.Parameter, Any], Any] | None = None
    multiple: bool = False  # repeatable; the environment variable holds several
    shown: str | None = None  # the default as --help shows it, when not as it is held


def setting(
    flag: str,
    env: str,
    help: str,
    default: Any = None,
    **how: Any,
) -> Any:
    """A settings field: its default, and how the command line and environment give it."""
    return dataclasses.field(default=default, metadata={_FLAG: _Flag(flag, env, help, **how)})


def _option(field: dataclasses.Field[Any]) -> Callable[[F], F]:
    how: _Flag = field.metadata[_FLAG]
    default = None if field.default is dataclasses.MISSING else field.default
    return click.option(
        how.flag,
        field.name,
        envvar=how.env,
        type=how.type,
        default=default,
        is_flag=how.is_flag,
        multiple=how.multiple,
        callback=how.callback,
        show_default=how.shown
        or (default not in (None, ()) and not callable(default) and not how.is_flag),
        help=how.help,
    )


def options(*groups: type[DataclassInstance]) -> Callable[[F], F]:
    """The click options of these settings groups, in their declared order."""

    def decorate(f: F) -> F:
        for group in reversed(groups):
            for field in reversed(dataclasses.fields(group)):
                f = _option(field)(f)
        return f

    return decorate


def environment_variables(*groups: type[DataclassInstance]) -> dict[str, str]:
    """Each setting's environment variable, by its name, in the declared order."""
    return {f.name: f.metadata[_FLAG].env for group in groups for f in dataclasses.fields(group)}


def read(group: type[S], given: Mapping[str, Any]) -> S:
    """The settings object of `group` from the keywords its options gave the command."""
    return group(**{f.name: given[f.name] for f in dataclasses.fields(group)})


def default_data_dir() -> Path:
    """Where the broker's state goes, and the worker's under it, when no --data-dir says."""
    xdg = os.environ.get("XDG_DATA_HOME")
    return Path(xdg) / "jobd" if xdg else Path.home() / ".local" / "share" / "jobd"


def _name_option(ctx: click.Context, _param: click.Parameter, value: str) -> str:
    name = worker_name(value)
    if name != value:
        ctx.meta[NAME_GIVEN] = value  # logged once logging is set up
    return name


def _gpus_option(_ctx: click.Context, _param: click.Parameter, value: str | None) -> Gpus | None:
    return parse_gpus(value)


def _size_option(_ctx: click.Context, _param: click.Parameter, value: Any) -> int | None:
    return size_option(value)


def _labels_option(
    _ctx: click.Context, _param: click.Parameter, value: tuple[str, ...]
) -> tuple[tuple[str, str], ...]:
    return parse_labels(value)


def _roots_option(
    _ctx: click.Context, _param: click.Parameter, value: tuple[Path, ...]
) -> tuple[str, ...]:
    return tuple(mount_roots_of(value))


def _users_option(
    _ctx: click.Context, _param: click.Parameter, value: tuple[str, ...]
) -> tuple[str, ...]:
    """--allow-user names, each given alone or several comma-separated; (): none given."""
    names = [name.strip() for given in value for name in given.split(",") if name.strip()]
    for name in names:
        try:
            check_user_name(name)
        except ValueError as exc:
            raise click.BadParameter(str(exc)) from None
    return tuple(sorted(set(names)))


def _address_option(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    if value is None:
        return None
    try:
        return check_address(value.strip())
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


_A_PATH = click.Path(path_type=Path)


@dataclass(frozen=True)
class OutputOptions:
    """The settings the broker and the worker share, on what they write (`jobd dev` takes
    them once)."""

    max_log_bytes: int = setting(
        "--max-log-bytes",
        "JOBD_MAX_LOG_BYTES",
        "Output kept per job (its head and newest bytes): by the broker, and by the "
        "worker per output file.",
        default=1 << 30,
        type=click.IntRange(min=4096),
    )
    group_readable: bool = setting(
        "--group-readable",
        "JOBD_GROUP_READABLE",
        "Let the group of jobd's user read its data, state and log directories and files "
        "(0750, 0640) rather than jobd's user alone (0700, 0600).",
        default=False,
        is_flag=True,
    )


@dataclass(frozen=True)
class BrokerOptions:
    """`jobd broker`'s settings (and `jobd dev`'s broker)."""

    host: str = setting("--host", "JOBD_HOST", "Address to bind.", default="127.0.0.1")
    port: int = setting("--port", "JOBD_PORT", "Port to bind.", default=8765, type=int)
    data_dir: Path | None = setting(
        "--data-dir",
        "JOBD_DATA_DIR",
        "Broker state: SQLite file, admin token. "
        "[default: $XDG_DATA_HOME/jobd or ~/.local/share/jobd]",
        type=_A_PATH,
    )
    token: str | None = setting(
        "--token",
        "JOBD_TOKEN",
        "The admin bearer token. [default: <data-dir>/admin.token, made on first start]",
    )
    db: str | None = setting(
        "--db",
        "JOBD_DB",
        "Store URL: sqlite:///PATH or postgresql://... [default: sqlite:///<data-dir>/jobd.db]",
    )
    log_dir: Path | None = setting(
        "--log-dir",
        "JOBD_LOG_DIR",
        "Where events.jsonl and job logs go. [default: ~/jobd/logs]",
        type=_A_PATH,
    )
    projects: Path | None = setting(
        "--projects", "JOBD_PROJECTS", "A projects.yaml to load and keep applied.", type=_A_PATH
    )
    events_max_bytes: int = setting(
        "--events-max-bytes",
        "JOBD_EVENTS_MAX_BYTES",
        "Rotate events.jsonl to events.jsonl.1 once it reaches this size (0: never).",
        default=100 << 20,
        type=click.IntRange(min=0),
    )
    events_keep: int = setting(
        "--events-keep",
        "JOBD_EVENTS_KEEP",
        "Rotated events.jsonl files kept (events.jsonl.1 ... .N); older ones are removed.",
        default=5,
        type=click.IntRange(min=1, max=1000),
    )
    auto_preempt_queued: float = setting(
        "--auto-preempt-queued",
        "JOBD_AUTO_PREEMPT_QUEUED_SECONDS",
        "Seconds a job must wait for capacity before the sweeper preempts for it.",
        default=300,
        type=float,
    )
    auto_preempt_min_runtime: float = setting(
        "--auto-preempt-min-runtime",
        "JOBD_AUTO_PREEMPT_MIN_RUNTIME_SECONDS",
        "Seconds a job must have run before the sweeper may preempt it.",
        default=300,
        type=float,
    )
    sweep_interval: float = setting(
        "--sweep-interval",
        "JOBD_SWEEP_INTERVAL_SECONDS",
        "Full resync period (timers do not wait for it).",
        default=300,
        type=float,
    )
    lost_timeout: float = setting(
        "--lost-timeout",
        "JOBD_LOST_TIMEOUT_SECONDS",
        "Seconds a job may stay Lost before it is Failed.",
        default=300,
        type=float,
    )
    finished_job_ttl: float | None = setting(
        "--finished-job-ttl",
        "JOBD_FINISHED_JOB_TTL_S",
        "Remove a finished job, its logs and its events this long after it ended "
        "(90, 10m, 2h, 30d), unless the job or its project says "
        "ttl_after_finished_s. [default: keep for ever]",
        type=Duration(),
    )
    fairshare_half_life: float = setting(
        "--fairshare-half-life",
        "JOBD_FAIRSHARE_HALF_LIFE",
        "Fair share: past usage counts half after this long (90, 10m, 2h, 7d). [default: 7d]",
        default=7 * 86400.0,
        type=Duration(),
    )
    fairshare_cpu_weight: float = setting(
        "--fairshare-cpu-weight",
        "JOBD_FAIRSHARE_CPU_WEIGHT",
        "Fair share: what a CPU-second bills, a GPU-second billing 1.",
        default=0.0625,
        type=click.FloatRange(min=0, max=1000),
    )
    fairshare_memory_weight: float = setting(
        "--fairshare-memory-weight",
        "JOBD_FAIRSHARE_MEMORY_WEIGHT",
        "Fair share: what a GiB-second of memory bills, a GPU-second billing 1.",
        default=0.0078125,
        type=click.FloatRange(min=0, max=1000),
    )
    webhook: tuple[str, ...] = setting(
        "--webhook",
        "JOBD_WEBHOOK",
        "A broker-wide notification sink: every job's phase changes that "
        "--webhook-events names are posted to this URL. Repeatable (the environment "
        "variable: URLs separated by spaces).",
        default=(),
        multiple=True,
    )
    webhook_events: str = setting(
        "--webhook-events",
        "JOBD_WEBHOOK_EVENTS",
        "The phases the --webhook sinks are told of, comma-separated: Running, "
        "Succeeded, Failed, Preempted, Cancelled, Lost.",
        default="Succeeded,Failed,Preempted,Cancelled",
    )
    webhook_format: str = setting(
        "--webhook-format",
        "JOBD_WEBHOOK_FORMAT",
        "The body the --webhook sinks get: json, slack ({text}) or discord ({content}).",
        default="json",
        type=click.Choice(["json", "slack", "discord"]),
    )
    webhook_secret: str | None = setting(
        "--webhook-secret",
        "JOBD_WEBHOOK_SECRET",
        "Sign every notification (X-Jobd-Signature: sha256=HMAC of the body) with this "
        "key, unless its job's notify target has a secret of its own. [default: unsigned]",
    )
    webhook_timeout: float = setting(
        "--webhook-timeout",
        "JOBD_WEBHOOK_TIMEOUT_S",
        "Seconds a notification's request may take before it counts as failed.",
        default=10.0,
        type=click.FloatRange(min=0.1, max=300),
    )
    webhook_backoff: float = setting(
        "--webhook-backoff",
        "JOBD_WEBHOOK_BACKOFF_S",
        "Seconds before a failed notification is tried again, doubling each time.",
        default=1.0,
        type=click.FloatRange(min=0.01, max=3600),
    )
    webhook_backoff_max: float = setting(
        "--webhook-backoff-max",
        "JOBD_WEBHOOK_BACKOFF_MAX_S",
        "The longest wait between two tries of a notification.",
        default=300.0,
        type=click.FloatRange(min=0.01, max=86400),
    )
    webhook_queue: int = setting(
        "--webhook-queue",
        "JOBD_WEBHOOK_QUEUE",
        "Notifications kept for one sink that is down; past this the oldest is dropped "
        "(counted in jobd_notify_dropped_total).",
        default=1000,
        type=click.IntRange(min=1, max=1_000_000),
    )
    head_timeout: float = setting(
        "--http-head-timeout",
        "JOBD_HTTP_HEAD_TIMEOUT_S",
        "Seconds a connection may take to send a request's head (its first, or the next "
        "once it has started) before it is closed.",
        default=10,
        type=click.FloatRange(min=0.1),
    )
    max_client_connections: int = setting(
        "--max-client-connections",
        "JOBD_MAX_CLIENT_CONNECTIONS",
        "Connections open at once from one address beyond loopback (0: no cap); "
        "more are answered 503.",
        default=512,
        type=click.IntRange(min=0),
    )
    fd_reserve: int = setting(
        "--fd-reserve",
        "JOBD_FD_RESERVE",
        "Descriptors kept from connections (for the store, logs and new arrivals): "
        "past RLIMIT_NOFILE less this, a new connection closes the oldest one still "
        "waiting for its request.",
        default=256,
        type=click.IntRange(min=16),
    )
    socket: str | None = setting(
        "--socket",
        "JOBD_SOCKET",
        "The Unix socket local users reach the broker on, known by their uid (no token); "
        "`none`: no socket. [default: /run/jobd/jobd.sock for root's `jobd broker`, else "
        "$XDG_RUNTIME_DIR/jobd.sock; `jobd dev`: <data-dir>/jobd.sock]",
    )
    admin_group: str | None = setting(
        "--admin-group",
        "JOBD_ADMIN_GROUP",
        "A Unix group whose members are admins over the socket (root always is). [default: none]",
    )
    leader_lease: float = setting(
        "--leader-lease",
        "JOBD_LEADER_LEASE_S",
        "Brokers on one PostgreSQL store: seconds after the leader's last renewal before "
        "a standby takes over.",
        default=15.0,
        type=click.FloatRange(min=0.1, max=3600),
    )
    leader_renew_deadline: float = setting(
        "--leader-renew-deadline",
        "JOBD_LEADER_RENEW_DEADLINE_S",
        "Seconds the leader keeps trying to renew its lease before it steps down "
        "(shorter than --leader-lease).",
        default=10.0,
        type=click.FloatRange(min=0.05, max=3600),
    )
    leader_retry_period: float = setting(
        "--leader-retry-period",
        "JOBD_LEADER_RETRY_PERIOD_S",
        "Seconds between the leader's renewals, and between a standby's tries to take "
        "the lease (shorter than --leader-renew-deadline).",
        default=2.0,
        type=click.FloatRange(min=0.01, max=3600),
    )
    advertise_url: str | None = setting(
        "--advertise-url",
        "JOBD_ADVERTISE_URL",
        "The URL other brokers send clients to while this one leads. "
        "[default: http://<host>:<port> of the bind; this host's name when bound to all "
        "addresses]",
    )


@dataclass(frozen=True)
class AgentConnection:
    """How `jobd worker` reaches its broker (`jobd dev`'s agent is handed both)."""

    server: str = setting(
        "--server",
        "JOBD_URL",
        "The broker's URL; several, comma-separated, to fail over between brokers.",
        default="http://127.0.0.1:8765",
    )
    token: str | None = setting(
        "--token", "JOBD_TOKEN", "Bearer token. [default: <data-dir>/admin.token]"
    )
    token_file: Path | None = setting(
        "--token-file",
        "JOBD_TOKEN_FILE",
        "Read the token from this file, mode 0600 (a systemd credential works): "
        "preferred to --token, which the agent's environment would show.",
        type=_A_PATH,
    )
    log_dir: Path | None = setting(
        "--log-dir",
        "JOBD_LOG_DIR",
        "Not used by the worker: job output lives in its --state-dir. [default: ~/jobd/logs]",
        type=_A_PATH,
    )
    socket: str | None = setting(
        "--socket",
        "JOBD_SOCKET",
        "A Unix socket this host's users reach the broker through: the agent vouches for "
        "each caller's user (never root) under its worker token; `none`: no socket. "
        "[default: /run/jobd/jobd.sock for a root worker, else none]",
    )


@dataclass(frozen=True)
class WorkerOptions:
    """`jobd worker`'s settings (and `jobd dev`'s worker)."""

    name: str = setting(
        "--name",
        "JOBD_WORKER_NAME",
        "Worker identity, lower-cased (GPU-Box.lab is gpu-box.lab). [default: hostname]",
        default=socket.gethostname,
        callback=_name_option,
    )
    slots: int | None = setting(
        "--slots",
        "JOBD_WORKER_SLOTS",
        "Concurrent CPU-only jobs (a GPU job takes its GPUs, no slot). "
        "[default: number of GPUs, else 1]",
        type=click.IntRange(min=1),
    )
    gpus: Gpus | None = setting(
        "--gpus",
        "JOBD_WORKER_GPUS",
        "GPU indices to hand out, e.g. 0,1, or with each one's memory, "
        "0:24GiB,1:80GiB, or 'none'; checked against NVML or nvidia-smi where they "
        "answer. [default: from NVML, else nvidia-smi]",
        callback=_gpus_option,
    )
    cpus: float | None = setting(
        "--cpus",
        "JOBD_WORKER_CPUS",
        "CPUs that jobs naming CPUs may hold here (fractions: 7.5). "
        "[default: the CPUs this process may run on, less --reserve-cpus]",
        type=click.FloatRange(min=0, max=1 << 20),
    )
    memory: int | None = setting(
        "--memory",
        "JOBD_WORKER_MEMORY",
        "Memory that jobs naming memory may hold here: 64GiB, 512G. "
        "[default: MemTotal of /proc/meminfo, less --reserve-memory]",
        callback=_size_option,
    )
    reserve_cpus: float = setting(
        "--reserve-cpus",
        "JOBD_WORKER_RESERVE_CPUS",
        "CPUs kept for the host when the CPUs are detected (not when --cpus says).",
        default=DEFAULT_RESERVE_CPUS,
        type=click.FloatRange(min=0),
    )
    reserve_memory: int = setting(
        "--reserve-memory",
        "JOBD_WORKER_RESERVE_MEMORY",
        "Memory kept for the host when the memory is detected (not when --memory says).",
        default=DEFAULT_RESERVE_MEMORY,
        type=click.STRING,  # a size as written: the callback reads it
        callback=_size_option,
        shown="2GiB",
    )
    labels: tuple[tuple[str, str], ...] = setting(
        "--label",
        "JOBD_WORKER_LABELS",
        "A label that node_selector matches, K=V (repeatable; the variable takes several, "
        "comma-separated), over the detected arch, os and gpu.model.",
        default=(),
        multiple=True,
        callback=_labels_option,
    )
    mount_roots: tuple[str, ...] = setting(
        "--mount-root",
        "JOBD_WORKER_MOUNT_ROOTS",
        "Place here only jobs whose cwd is under this path (repeatable; the variable "
        "takes several, ':'-separated). [default: none: any cwd]",
        default=(),
        multiple=True,
        type=_A_PATH,
        callback=_roots_option,
    )
    advertise_address: str | None = setting(
        "--advertise-address",
        "JOBD_WORKER_ADVERTISE_ADDRESS",
        "The IP address or host name the other members of a multi-host job reach this "
        "host at. [default: the address this host reaches the broker from]",
        callback=_address_option,
    )
    allowed_users: tuple[str, ...] = setting(
        "--allow-user",
        "JOBD_WORKER_ALLOW_USERS",
        "Run here only the jobs of this owner (repeatable; the variable takes several, "
        "comma-separated); jobs of no owner run too. [default: any user this host knows]",
        default=(),
        multiple=True,
        callback=_users_option,
    )
    memory_enforcement: str = setting(
        "--memory-enforcement",
        "JOBD_WORKER_MEMORY_ENFORCEMENT",
        "How a job's memory is capped: auto (a cgroup where this worker may make one, v2 "
        "or v1, else its shim watches the job's RSS), cgroup (refuse to start without "
        "one), rss (always watch).",
        default="auto",
        type=click.Choice(["auto", "cgroup", "rss"]),
    )
    checkpoint_root: str | None = setting(
        "--checkpoint-root",
        "JOBD_WORKER_CHECKPOINT_ROOT",
        "Checkpoint root. [default: $XDG_DATA_HOME/jobd/checkpoints "
        "or ~/.local/share/jobd/checkpoints]",
    )
    default_grace: float = setting(
        "--default-grace",
        "JOBD_WORKER_DEFAULT_GRACE_S",
        "Grace for jobs whose spec and project say none.",
        default=60,
        type=click.FloatRange(0, 300),
    )
    checkpoint_ttl_days: float | None = setting(
        "--remove-checkpoints-after-days",
        "JOBD_WORKER_CHECKPOINT_TTL_DAYS",
        "Remove checkpoint directories of jobs that ended more than this many days "
        "ago and that no unfinished job resumes from. [default: keep everything]",
        type=click.FloatRange(min=0),
    )
    state_dir: Path | None = setting(
        "--state-dir",
        "JOBD_WORKER_STATE_DIR",
        "The worker's own state: a directory per job attempt (its supervisor's files, "
        "output, exit status) under jobs/. [default: <data-dir>/worker/<name>]",
        type=_A_PATH,
    )
    keep_job_files: bool = setting(
        "--keep-job-files",
        "JOBD_WORKER_KEEP_JOB_FILES",
        "Keep a job's state directory (and output) once it is over and shipped.",
        default=False,
        is_flag=True,
    )
    # The broker's bounds (api.models MIN_LEASE_S, MAX_LEASE_S; not imported here, to
    # keep pydantic out of `jobd --help`): refused at start, not at registration.
    lease_s: float = setting(
        "--lease",
        "JOBD_WORKER_LEASE_SECONDS",
        "Lease duration, 1 to 3600 s; renewed every third of it.",
        default=15,
        type=click.FloatRange(min=1, max=3600),
    )
