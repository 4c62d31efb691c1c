"""The agent's process, assembled: its token, its host's GPUs, its settings from the
daemon's, and what it says when it stops.

Imported by `jobd worker` and `jobd dev` when they run, after `jobd worker` has kept rich
out (main._without_rich): it loads the worker, never the broker.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

import click

from jobd.cli.credentials import TokenFileError, read_token_file
from jobd.daemon.inventory import detected_cpus, detected_memory, labels_of, offered
from jobd.daemon.listening import unix_listener_or_none
from jobd.daemon.settings import NAME_GIVEN, OutputOptions, WorkerOptions, default_data_dir
from jobd.daemon.worker_host import Gpus, StartupError, check_gpus, detect_gpus
from jobd.discovery import TokenError, usable_token
from jobd.logconfig import get_logger
from jobd.worker.agent import Agent
from jobd.worker.checkpoints import checkpoint_root
from jobd.worker.limits import NoCgroup, detect_enforcement, pinnable_cores
from jobd.worker.settings import WorkerSettings

__all__ = [
    "forget_token",
    "own_user_name",
    "relay_socket",
    "say_jobs_run_on",
    "socket_file",
    "worker_settings",
    "worker_token",
]


def worker_settings(
    worker: WorkerOptions, output: OutputOptions, data_dir: Path | None = None
) -> WorkerSettings:
    """What the agent runs with: the settings, with the host's GPUs and the derived defaults."""
    given = click.get_current_context().meta.get(NAME_GIVEN)
    if given is not None:
        get_logger().info("worker_name_normalised", worker=worker.name, given=given)
    gpus = _host_gpus(worker.gpus)
    env = dict(os.environ)
    if worker.checkpoint_root:
        env["JOBD_WORKER_CHECKPOINT_ROOT"] = worker.checkpoint_root
    state_dir = worker.state_dir or (data_dir or default_data_dir()) / "worker" / worker.name
    cpus = offered(worker.cpus, detected_cpus(), worker.reserve_cpus)
    memory = offered(worker.memory, detected_memory(), worker.reserve_memory)
    cores = pinnable_cores(worker.cpus is not None, worker.reserve_cpus)
    try:
        enforcement = detect_enforcement(worker.name, worker.memory_enforcement, cores)
    except NoCgroup as exc:
        raise StartupError(str(exc)) from None
    return WorkerSettings(
        name=worker.name,
        slots=worker.slots or max(1, len(gpus)),
        gpus=sorted(gpus),
        cpus=cpus,
        memory=None if memory is None else int(memory),
        labels=labels_of(worker.labels, sorted(gpus)),
        mount_roots=list(worker.mount_roots),
        advertise_address=worker.advertise_address,
        users=list(worker.allowed_users) or None,
        enforcement=enforcement,
        gpu_memory={g: m for g, m in gpus.items() if m is not None},
        checkpoint_root=checkpoint_root(env),
        default_grace_s=worker.default_grace,
        state_dir=state_dir,
        checkpoint_ttl_days=worker.checkpoint_ttl_days,
        max_log_bytes=output.max_log_bytes,
        keep_job_files=worker.keep_job_files,
    )


def own_user_name() -> str | None:
    """The name of the user this process runs as; None when the host has no entry for it."""
    import pwd

    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return None


def _host_gpus(declared: Gpus | None) -> Gpus:
    """The GPUs to hand out, with their memory: declared or detected (NVML, nvidia-smi),
    checked against what the host has."""
    gpus, warning = check_gpus(declared, detect_gpus())
    if warning:
        get_logger().warning("gpu_detection_failed", message=warning)
    return gpus


def worker_token(token: str | None, token_file: Path | None) -> str | None:
    """The token file's token when one is given (refused unless mode 0600), else --token."""
    try:
        if token_file is None:
            return usable_token(token)
        return read_token_file(token_file.expanduser())
    except (TokenFileError, TokenError) as exc:
        click.echo(f"jobd worker: {exc}", err=True)
        raise SystemExit(2) from None


def forget_token() -> None:
    """No child of this process inherits the token (nor the file's name).

    Popping it from os.environ also unsets it in the C environment every child is
    started with. The kernel still shows the environment this process *started* with in
    /proc/PID/environ, which is why a worker should be given --token-file instead.
    """
    for name in ("JOBD_TOKEN", "JOBD_TOKEN_FILE"):
        os.environ.pop(name, None)


def relay_socket(given: str | None, server: str) -> socket.socket | None:
    """The bound socket of the agent's relay (worker/relay.py), or None: not asked for, or
    not to be had (said on stderr; a --socket given that cannot be had ends the worker)."""
    if given == "none" or (given is None and os.geteuid() != 0):
        return None
    if all(url.strip().startswith("unix:") for url in server.split(",")):
        # Over the broker's own socket the agent is its uid, not its token: it could vouch
        # for nobody, and must not pass its callers on as itself.
        click.echo("jobd: no relay socket: the broker is reached over its own socket", err=True)
        return None
    path = Path(given).expanduser() if given else Path("/run/jobd/jobd.sock")
    return unix_listener_or_none(path, bool(given), "relay socket")


def socket_file(sock: socket.socket | None) -> Path | None:
    """Where a bound Unix socket's file is (to remove it at stop, once it is closed)."""
    return None if sock is None else Path(sock.getsockname())


def say_jobs_run_on(agent: Agent) -> None:
    """Stopping jobd stops no job: say how many run on, to be re-adopted at the next start."""
    running = agent.running_jobs()
    get_logger().info("jobs_keep_running", jobs=running, state_dir=str(agent.settings.state_dir))
    if running:
        noun = "job keeps" if running == 1 else "jobs keep"
        click.echo(f"{running} {noun} running; the next start re-adopts them.", err=True)
