"""`jobd`: the programs — broker, worker, dev (both in one process), token, mcp, bench and
migrate-store.

Every setting is a flag and an environment variable (flag > env > default), as in
CONTRACT.md §2, declared once in settings.py. `jobd dev` accepts the broker's and the
worker's flags together. The commands load what they run only when they run (the broker
in broker_process.py, the agent in worker_process.py): `jobd --help` loads no heavy
library, and `jobd worker` no broker.
"""

from __future__ import annotations

import gc
import signal
import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import anyio
import click
from click.core import ParameterSource

from jobd.cli.mcp_command import mcp
from jobd.daemon.migrate_store import migrate_store
from jobd.daemon.settings import (
    AgentConnection,
    BrokerOptions,
    OutputOptions,
    WorkerOptions,
    options,
    read,
)
from jobd.daemon.tokens import token
from jobd.discovery import default_token

if TYPE_CHECKING:
    import socket
    from pathlib import Path

    import uvicorn

    from jobd.worker.agent import Agent

__all__ = ["cli", "main"]


def _log() -> Any:
    from jobd.logconfig import get_logger  # structlog: loaded after _without_rich, if at all

    return get_logger()


def _without_rich() -> None:
    """Keep rich and greenlet out of the worker's process: ~4 and ~1 MiB of an idle
    worker's ~47.

    structlog (its console renderer and traceback formatting) and httpx (its command-line
    client) import rich when it is installed, and both run without it; the worker uses
    neither, nor anything else of rich's. structlog imports greenlet, when installed (it
    comes with SQLAlchemy, the broker's), only to tell greenlets apart in its deprecated
    thread-local context, which jobd does not use. Marking the modules absent before
    anything imports them is how a program opts out of such an optional import. A process
    that has already loaded them (tests driving the CLI in-process) keeps them.
    """
    for name in ("rich", "httpx._main", "greenlet"):
        sys.modules.setdefault(name, None)  # type: ignore[arg-type]


def _without_ssl(server: str) -> None:
    """Load no TLS library in an agent whose brokers are all plain http:// (~4.5 MiB of
    its RSS; daemon/lazy_ssl.py). An https:// broker, a Unix socket or a proxy in the
    environment goes through httpx, which needs ssl at once. Before anything imports
    asyncio (structlog does)."""
    from jobd.wire.plain_http import plain_http_serves

    if all(plain_http_serves(url.strip()) for url in server.split(",") if url.strip()):
        from jobd.daemon import lazy_ssl

        lazy_ssl.defer()


def _run(
    main: Callable[[], Awaitable[None]], uvloop: bool = False, serves_http: bool = True
) -> None:
    """Run the program's loop; the broker alone may use uvloop.

    uvloop serves HTTP faster. The programs that run workloads (worker, dev) stay on
    asyncio's loop: workloads once started several times slower under uvloop. They now
    start with posix_spawn (worker/shim/lifecycle.py), so that reason is worth measuring again.
    """
    if uvloop:
        try:
            import uvloop as _  # noqa: F401  (installed by uvicorn[standard])
        except ImportError:
            uvloop = False
    _tune_gc(serves_http)
    anyio.run(main, backend_options={"use_uvloop": uvloop})


def _tune_gc(serves_http: bool) -> None:
    """Fewer cyclic garbage collections for a long-running server.

    Each request allocates thousands of short-lived objects (pydantic models, rows,
    dicts); at CPython's default of a young collection every 700 allocations, the
    collector took a quarter of a create's CPU. What exists at start-up (modules, the
    app) is frozen out of every later collection; garbage is still collected, in larger
    and rarer young passes — in the processes that serve HTTP (broker, dev). The worker
    alone keeps CPython's thresholds: rarer passes let garbage pile up and fragment the
    heap, 2.5-3.5 MiB more RSS kept after a 200-400 job drain, for no CPU per job seen
    (paired drains, docs/performance.md).
    """
    gc.collect()
    gc.freeze()
    if serves_http:
        gc.set_threshold(20_000, 20, 20)


async def _until_signalled(scope: anyio.CancelScope) -> None:
    """Wait for SIGINT or SIGTERM, then cancel `scope`: the start of an orderly stop."""
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for signum in signals:
            _log().info("stopping", signal=signal.Signals(signum).name)
            scope.cancel()
            return


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="jobd", prog_name="jobd", message="%(prog)s %(version)s")
def cli() -> None:
    """jobd: a small, fast job scheduler for the GPU machines you own."""


class _Daemon(click.Group):
    """A daemon's command: it runs the daemon, and `install` writes its systemd unit
    (daemon/install.py, loaded only when asked for: every jobd process would carry it)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return ["install"]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name != "install" or self.name is None:
            return None
        from jobd.daemon.install import install_command

        return install_command(self.name)


@cli.group(cls=_Daemon, invoke_without_command=True)
@options(BrokerOptions, OutputOptions)
@click.pass_context
def broker(ctx: click.Context, /, **given: Any) -> None:
    """Run the control plane: HTTP API, store, reconcile loops.

    `jobd broker install [SETTINGS]` writes a systemd unit that runs it instead.
    """
    if _installing(ctx):
        return
    from jobd.daemon import broker_process as assemble
    from jobd.daemon.file_modes import keep_files_private, warn_wide_modes
    from jobd.logconfig import configure_logging

    settings, output = read(BrokerOptions, given), read(OutputOptions, given)
    private = keep_files_private(output.group_readable)  # before anything is created
    config = assemble.broker_config(settings, output)
    assemble.refuse_weak_token(config, settings.host)
    listener = assemble.listen(settings.host, settings.port)  # before the store is opened
    where = assemble.socket_path(settings, config.data_dir, dev=False)
    unix = assemble.listen_unix(where, bool(settings.socket), config.data_dir)
    configure_logging("broker")
    warn_wide_modes(assemble.private_paths(config), private)
    app = assemble.open_app(config)
    limits = assemble.connection_limits(settings)
    server = assemble.http_server(app, settings.host, settings.port, limits)
    assemble.say_where(config, settings.host, settings.port, unix=unix)

    async def run() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(server.serve, _listeners(listener, unix))
            with anyio.CancelScope() as waiting:
                await _until_signalled(waiting)
            _stop_broker(app, server)

    try:
        _run(run, uvloop=True)
    finally:
        _remove_socket(unix, where)
    click.echo("jobd: stopped", err=True)


def _listeners(tcp: socket.socket, unix: socket.socket | None) -> list[socket.socket]:
    return [tcp] if unix is None else [tcp, unix]


def _remove_socket(unix: socket.socket | None, where: Path | None) -> None:
    if unix is not None and where is not None:
        from jobd.daemon.listening import unlink_socket

        unlink_socket(unix, where)


def _stop_broker(app: Any, server: uvicorn.Server) -> None:
    app.state.broker.release_waiters()
    server.should_exit = True


@cli.group(cls=_Daemon, invoke_without_command=True)
@options(AgentConnection, WorkerOptions, OutputOptions)
@click.pass_context
def worker(ctx: click.Context, /, **given: Any) -> None:
    """Run the agent on this host: runs the jobs bound to it, reports what it sees.

    `jobd worker install --server URL --token-file F [SETTINGS]` writes a systemd unit
    that runs it instead.
    """
    if _installing(ctx):
        return
    _without_rich()
    connection = read(AgentConnection, given)
    _without_ssl(connection.server)  # before anything imports asyncio
    from jobd.daemon import worker_process as assemble
    from jobd.daemon.file_modes import keep_files_private, warn_wide_modes
    from jobd.logconfig import configure_logging
    from jobd.worker.agent import Agent

    output = read(OutputOptions, given)
    private = keep_files_private(output.group_readable)  # before anything is created
    token = assemble.worker_token(connection.token, connection.token_file)
    token = token or default_token(connection.server)
    assemble.forget_token()
    configure_logging("worker")
    worker_options = read(WorkerOptions, given)
    settings = assemble.worker_settings(worker_options, output)
    settings.state_dir.mkdir(parents=True, exist_ok=True)  # under the daemon's umask
    warn_wide_modes([settings.state_dir], private)
    agent = Agent(connection.server, token, settings, lease_duration_s=worker_options.lease_s)
    relayed = assemble.relay_socket(connection.socket, connection.server)
    relayed_at = assemble.socket_file(relayed)

    async def run() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_until_signalled, tg.cancel_scope)
            if relayed is not None:
                from jobd.worker.relay import Relay

                relay = Relay(connection.server, token, settings.name)
                tg.start_soon(relay.serve, relayed)
            await agent.run()  # on a signal: cancelled; its jobs run on
            tg.cancel_scope.cancel()  # returned: refused (agent.refusal)

    try:
        _run(run, serves_http=False)
    finally:
        _remove_socket(relayed, relayed_at)
    _refused(agent)
    assemble.say_jobs_run_on(agent)


def _installing(ctx: click.Context) -> bool:
    """`jobd broker install ...`: the settings are install's, given after it."""
    if ctx.invoked_subcommand is None:
        return False
    before = [p.opts[0] for p in ctx.command.params if _given(ctx, p.name)]
    if before:
        raise click.UsageError(f"give {', '.join(before)} after `install`, not before it")
    return True


def _given(ctx: click.Context, name: str | None) -> bool:
    return name is not None and ctx.get_parameter_source(name) == ParameterSource.COMMANDLINE


def _refused(agent: Agent) -> None:
    """An agent that may not run as its worker: its reason, one sentence, and exit 1."""
    if agent.refusal is not None:
        click.echo(f"jobd: error: {agent.refusal}", err=True)
        raise SystemExit(1)


@cli.command()
@options(BrokerOptions, WorkerOptions, OutputOptions)
def dev(**given: Any) -> None:
    """Broker and one worker in one process, on embedded SQLite: everything on one machine."""
    from jobd.daemon import broker_process, worker_process
    from jobd.daemon.file_modes import keep_files_private, warn_wide_modes
    from jobd.logconfig import configure_logging
    from jobd.worker.agent import Agent

    broker_settings, output = read(BrokerOptions, given), read(OutputOptions, given)
    private = keep_files_private(output.group_readable)  # before anything is created
    host, port = broker_settings.host, broker_settings.port
    config = broker_process.broker_config(broker_settings, output)
    # One user's machine: that user's own jobs are admitted even as root (docs/security.md).
    config.trusted_owner = worker_process.own_user_name()
    broker_process.refuse_weak_token(config, host)
    listener = broker_process.listen(host, port)  # before the store is opened
    where = broker_process.socket_path(broker_settings, config.data_dir, dev=True)
    unix = broker_process.listen_unix(where, bool(broker_settings.socket), config.data_dir)
    worker_process.forget_token()
    configure_logging("dev")
    app = broker_process.open_app(config)
    worker_options = read(WorkerOptions, given)
    settings = worker_process.worker_settings(worker_options, output, broker_settings.data_dir)
    settings.state_dir.mkdir(parents=True, exist_ok=True)  # under the daemon's umask
    warn_wide_modes([*broker_process.private_paths(config), settings.state_dir], private)
    limits = broker_process.connection_limits(broker_settings)
    server = broker_process.http_server(app, host, port, limits)
    agent = Agent(
        f"http://{host}:{port}",
        app.state.broker.token,
        settings,
        lease_duration_s=worker_options.lease_s,
    )
    broker_process.say_where(config, host, port, settings, unix)

    async def both() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(server.serve, _listeners(listener, unix))
            while not server.started:
                if server.should_exit:
                    raise SystemExit(1)
                await anyio.sleep(0.01)
            with anyio.CancelScope() as agent_scope:
                async with anyio.create_task_group() as worker_tg:
                    worker_tg.start_soon(_until_signalled, agent_scope)
                    await agent.run()
                    agent_scope.cancel()  # returned: refused (agent.refusal)
            # The worker has stopped (its jobs run on); now the broker.
            _stop_broker(app, server)

    try:
        _run(both)
    finally:
        _remove_socket(unix, where)
    _refused(agent)
    worker_process.say_jobs_run_on(agent)
    _log().info("stopped")


@cli.command()
@click.option(
    "--server",
    envvar="JOBD_URL",
    help="Benchmark this broker instead of starting one; of several, comma-separated, the leader.",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per scenario.")
@click.option("--scenario", "scenarios", multiple=True, help="Run only these (repeatable).")
@click.option(
    "--size",
    type=click.Choice(["tiny", "small", "full"]),
    default="small",
    show_default=True,
    help="How much work each scenario does.",
)
@click.option(
    "--concurrency",
    type=click.IntRange(1, 1024),
    default=32,
    show_default=True,
    help="Concurrent clients of the submit scenario.",
)
@click.option(
    "--stored",
    type=click.IntRange(0, 10_000_000),
    default=0,
    show_default=True,
    help="Start each broker on a store already holding this many jobs (99% finished, "
    "1% queued that cannot run): the figures with a long history.",
)
def bench(
    server: str | None,
    as_json: bool,
    scenarios: tuple[str, ...],
    size: str,
    concurrency: int,
    stored: int,
) -> None:
    """Built-in benchmarks against a broker it starts itself (or --server)."""
    from jobd.bench.runner import run_bench

    sys.exit(
        run_bench(server, as_json, list(scenarios), size, concurrency=concurrency, stored=stored)
    )


def main() -> None:
    cli(prog_name="jobd")


cli.add_command(token)
cli.add_command(mcp)
cli.add_command(migrate_store)


if __name__ == "__main__":
    main()
