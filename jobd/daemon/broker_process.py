"""The broker's process, assembled: its config from the settings, its checks before
anything is opened, its socket and its HTTP server.

Imported by `jobd broker` and `jobd dev` only, when they run: `jobd worker` loads no
broker (tests/unit/test_worker_loads_no_broker.py).
"""

from __future__ import annotations

import contextlib
import os
import re
import resource
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, get_args

import click
import uvicorn

from jobd.api.models import NotifyPhase
from jobd.api.sizes import format_size
from jobd.broker.auth.tokens import weak_token_refusal
from jobd.broker.http.connections import ConnectionLimits, guarded_protocol
from jobd.broker.leadership import LeaderTimings
from jobd.broker.notify.outbox import BrokerSink, NotifyConfig
from jobd.broker.state import BrokerConfig
from jobd.controllers.context import Settings
from jobd.controllers.fairshare import Billing
from jobd.daemon.listening import ListenError, bind_listener, unix_listener_or_none
from jobd.daemon.settings import BrokerOptions, OutputOptions, default_data_dir
from jobd.logconfig import redact_url
from jobd.store.base import StoreUnavailable

if TYPE_CHECKING:
    from jobd.worker.settings import WorkerSettings

__all__ = [
    "advertise_url",
    "broker_config",
    "connection_limits",
    "http_server",
    "leader_timings",
    "listen",
    "listen_unix",
    "open_app",
    "private_paths",
    "refuse_weak_token",
    "say_where",
    "socket_path",
]

ROOT_SOCKET = Path("/run/jobd/jobd.sock")  # a root broker's, where `job` looks first


def broker_config(broker: BrokerOptions, output: OutputOptions) -> BrokerConfig:
    """What the broker is built from: the settings, with the defaults that depend on others."""
    return BrokerConfig(
        data_dir=broker.data_dir or default_data_dir(),
        log_dir=broker.log_dir or Path.home() / "jobd" / "logs",
        db_url=broker.db,
        token=broker.token or None,
        projects_file=broker.projects,
        max_log_bytes=output.max_log_bytes,
        events_max_bytes=broker.events_max_bytes,
        events_keep=broker.events_keep,
        notify=notify_config(broker),
        admin_group=broker.admin_group or None,
        leader=leader_timings(broker),
        advertise_url=advertise_url(broker),
        settings=Settings(
            auto_preempt_queued_s=broker.auto_preempt_queued,
            auto_preempt_min_runtime_s=broker.auto_preempt_min_runtime,
            sweep_interval_s=broker.sweep_interval,
            lost_timeout_s=broker.lost_timeout,
            finished_job_ttl_s=broker.finished_job_ttl,
            billing=billing_of(broker),
        ),
    )


def leader_timings(broker: BrokerOptions) -> LeaderTimings:
    """The election's three timings (broker/leadership.py), refused when they cannot work."""
    timings = LeaderTimings(
        lease_s=broker.leader_lease,
        renew_deadline_s=broker.leader_renew_deadline,
        retry_period_s=broker.leader_retry_period,
    )
    refused = timings.refusal()
    if refused is not None:
        flag, reason = refused
        raise click.BadParameter(reason, param_hint=flag)
    return timings


def advertise_url(broker: BrokerOptions) -> str:
    """Where clients reach this broker while it leads: --advertise-url, else the bind."""
    if broker.advertise_url:
        if not re.fullmatch(r"https?://[^\x00-\x20\x7f/]+/?", broker.advertise_url):
            raise click.BadParameter(
                f"{broker.advertise_url[:60]!r} is not an http(s)://HOST[:PORT] URL",
                param_hint="--advertise-url",
            )
        return broker.advertise_url.rstrip("/")
    host = broker.host
    if host in ("0.0.0.0", "::", ""):  # every address: the one others know this host by
        host = socket.getfqdn()
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{broker.port}"


def billing_of(broker: BrokerOptions) -> Billing:
    """Fair share's weights and half-life (controllers/fairshare.py); a half-life of 0
    would forget usage at once, so it is refused."""
    if broker.fairshare_half_life <= 0:
        raise click.BadParameter("must be above 0", param_hint="--fairshare-half-life")
    return Billing(
        cpu=broker.fairshare_cpu_weight,
        memory_gib=broker.fairshare_memory_weight,
        half_life_s=broker.fairshare_half_life,
    )


def notify_config(broker: BrokerOptions) -> NotifyConfig:
    """The broker-wide sinks and how every notification is sent (broker/notify/)."""
    on = frozenset(p.strip() for p in broker.webhook_events.split(",") if p.strip())
    unknown = sorted(on - set(get_args(NotifyPhase)))
    if unknown:
        raise click.BadParameter(
            f"{unknown[0]!r} is not a phase notifications tell of "
            f"({', '.join(get_args(NotifyPhase))})",
            param_hint="--webhook-events",
        )
    for url in broker.webhook:
        if not re.fullmatch(r"https?://[^\x00-\x20\x7f]+", url):
            raise click.BadParameter(f"{url[:40]!r} is not an http(s) URL", param_hint="--webhook")
    return NotifyConfig(
        sinks=tuple(BrokerSink(url, on, broker.webhook_format) for url in broker.webhook),
        secret=broker.webhook_secret or None,
        timeout_s=broker.webhook_timeout,
        backoff_s=broker.webhook_backoff,
        backoff_max_s=broker.webhook_backoff_max,
        queue_cap=broker.webhook_queue,
    )


def private_paths(config: BrokerConfig) -> list[Path]:
    """What the broker writes, to be its user's alone: data and log directories, and a
    SQLite store kept elsewhere (with its WAL and shared memory)."""
    paths = [config.data_dir, config.log_dir]
    url = config.store_url
    if url.startswith("sqlite:///") and url != "sqlite:///:memory:":
        store = Path(url.removeprefix("sqlite:///"))
        paths += [store, *(store.with_name(store.name + end) for end in ("-wal", "-shm"))]
    return paths


def refuse_weak_token(config: BrokerConfig, host: str) -> None:
    """Before anything is opened or bound: beyond loopback, a short admin token is refused."""
    token = config.token
    path = config.data_dir / "admin.token"
    if token is None and path.is_file():
        token = path.read_text().strip()
    refusal = weak_token_refusal(host, token)
    if refusal is not None:
        click.echo(refusal, err=True)
        raise SystemExit(2)


def listen(host: str, port: int) -> socket.socket:
    """The bound socket the broker will serve on; a taken port ends jobd here, in a line."""
    try:
        return bind_listener(host, port)
    except ListenError as exc:
        click.echo(f"jobd: {exc}", err=True)
        raise SystemExit(1) from None


def socket_path(broker: BrokerOptions, data_dir: Path, dev: bool) -> Path | None:
    """Where the Unix socket goes: --socket; else root's `jobd broker` at /run/jobd (outside
    the 0700 data directory, so every local user reaches it), another user's in their
    $XDG_RUNTIME_DIR; `jobd dev` in its own data directory, so parallel ones never meet."""
    if broker.socket:
        return None if broker.socket == "none" else Path(broker.socket).expanduser()
    if dev:
        return data_dir / "jobd.sock"
    if os.geteuid() == 0:
        return ROOT_SOCKET
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    return Path(runtime) / "jobd.sock" if runtime else data_dir / "jobd.sock"


def listen_unix(path: Path | None, given: bool, data_dir: Path) -> socket.socket | None:
    """The bound Unix socket; one that cannot be had ends jobd when --socket named it, and
    is said and done without when it was the default."""
    if path is None:
        return None
    return unix_listener_or_none(path, given, "Unix socket", public_dir=path.parent != data_dir)


def open_app(config: BrokerConfig) -> Any:
    """The broker's app on its store; a store that cannot be opened ends jobd in a line."""
    from jobd.broker.app import create_app

    try:
        return create_app(config)
    except StoreUnavailable as exc:  # e.g. a truncated SQLite file (store/sql/storefile.py)
        click.echo(f"jobd: {exc}", err=True)
        raise SystemExit(1) from None


class _QuietServer(uvicorn.Server):
    """uvicorn without its own signal handling: `jobd dev` stops in order."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def connection_limits(broker: BrokerOptions) -> ConnectionLimits:
    """The bounds on connections (broker/http/connections.py): all but the reserve of the
    descriptors this process may open, never fewer than half of them."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    total = 1 << 20 if soft == resource.RLIM_INFINITY else max(soft - broker.fd_reserve, soft // 2)
    return ConnectionLimits(
        head_timeout_s=broker.head_timeout,
        per_client=broker.max_client_connections,
        total=total,
    )


def http_server(app: Any, host: str, port: int, limits: ConnectionLimits) -> uvicorn.Server:
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        # uvicorn's httptools protocol, with the bounds on idle connections it lacks.
        http=guarded_protocol(limits, app.state.broker.metrics),
        log_level="warning",
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=2,  # long-polls (watch, logs -f) must not hold a stop
        # Longer than any client's idle gap (heartbeats every lease/3): a connection the
        # server closes just as a worker reuses it fails that request.
        timeout_keep_alive=75,
        backlog=4096,
        proxy_headers=False,  # no client address is logged or trusted: nothing to rewrite
        server_header=False,
        log_config=None,  # uvicorn's own records go through configure_logging's JSON
    )
    return _QuietServer(config)


def _gpu_label(index: int, memory: dict[int, int]) -> str:
    """`0:24GiB`, or `0` where the GPU's memory is not known."""
    return f"{index}:{format_size(memory[index])}" if index in memory else str(index)


def say_where(
    config: BrokerConfig,
    host: str,
    port: int,
    worker: WorkerSettings | None = None,
    unix: socket.socket | None = None,
) -> None:
    lines = [f"jobd listening on http://{host}:{port}"]
    if unix is not None:
        lines.append(f"  socket: unix://{unix.getsockname()} (local users, by uid)")
    lines += [
        f"  store:  {redact_url(config.store_url)}",
        f"  token:  {'$JOBD_TOKEN' if config.token else config.data_dir / 'admin.token'}",
        f"  events: {config.log_dir / 'events.jsonl'}",
    ]
    if worker is not None:
        gpus = ",".join(_gpu_label(g, worker.gpu_memory) for g in worker.gpus) or "none"
        slots = f"{worker.slots} slot{'s' if worker.slots != 1 else ''}"
        lines.append(f"  worker: {worker.name} ({slots}, GPUs {gpus})")
    lines.append("Press Ctrl-C to stop.")
    # stdout: stderr carries only the structured log, one JSON object a line.
    click.echo("\n".join(lines))
