"""`jobd`: the programs — broker, worker, dev (both in one process) and bench.

Every setting is a flag and an environment variable (flag > env > default), as in
CONTRACT.md §2. `jobd dev` accepts the broker's and the worker's flags together.
"""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import socket
import sys
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import click

from jobd.cli.mcp_command import mcp
from jobd.cli.tokens import token

if TYPE_CHECKING:
    import uvicorn

    from jobd.broker.state import BrokerConfig
    from jobd.cli.worker_host import Gpus
    from jobd.worker.agent import Agent
    from jobd.worker.execution import WorkerSettings

__all__ = ["main"]

F = Callable[..., Any]


def _log() -> Any:
    from jobd.logconfig import get_logger  # structlog: loaded after _without_rich, if at all

    return get_logger()


def _without_rich() -> None:
    """Keep rich out of the worker's process: ~4 MB of an idle worker's ~47.

    structlog (its console renderer and traceback formatting) and httpx (its command-line
    client) import rich when it is installed, and both run without it; the worker uses
    neither, nor anything else of rich's. Marking the modules absent before anything
    imports them is how a program opts out of such an optional import. A process that has
    already loaded them (tests driving the CLI in-process) keeps them.
    """
    for name in ("rich", "httpx._main"):
        sys.modules.setdefault(name, None)  # type: ignore[arg-type]


def _default_data_dir() -> Path:
    xdg = os.environ.get("XDG_DATA_HOME")
    return Path(xdg) / "jobd" if xdg else Path.home() / ".local" / "share" / "jobd"


def _name_option(ctx: click.Context, _param: click.Parameter, value: str) -> str:
    from jobd.cli.worker_host import worker_name

    name = worker_name(value)
    if name != value:
        ctx.meta[_NAME_GIVEN] = value  # logged once logging is set up (_worker_settings)
    return name


_NAME_GIVEN = "jobd.worker_name_given"


def _gpus_option(_ctx: click.Context, _param: click.Parameter, value: str | None) -> Any:
    from jobd.cli.worker_host import parse_gpus

    return parse_gpus(value)


# One option for the broker, the worker and `jobd dev`, which takes both sets of options.
max_log_bytes_option = click.option(
    "--max-log-bytes",
    envvar="JOBD_MAX_LOG_BYTES",
    type=click.IntRange(min=4096),
    default=1 << 30,
    show_default=True,
    help="Output kept per job (its head and newest bytes): by the broker, and by the "
    "worker per output file.",
)


def broker_options(f: F) -> F:
    options = [
        click.option(
            "--host",
            envvar="JOBD_HOST",
            default="127.0.0.1",
            show_default=True,
            help="Address to bind.",
        ),
        click.option(
            "--port",
            envvar="JOBD_PORT",
            default=8765,
            type=int,
            show_default=True,
            help="Port to bind.",
        ),
        click.option(
            "--data-dir",
            envvar="JOBD_DATA_DIR",
            type=click.Path(path_type=Path),
            help=(
                "Broker state: SQLite file, admin token. "
                "[default: $XDG_DATA_HOME/jobd or ~/.local/share/jobd]"
            ),
        ),
        click.option(
            "--token",
            envvar="JOBD_TOKEN",
            help="The admin bearer token. [default: <data-dir>/admin.token, made on first start]",
        ),
        click.option(
            "--db",
            envvar="JOBD_DB",
            help="Store URL: sqlite:///PATH or postgresql://... [default: sqlite:///<data-dir>/jobd.db]",
        ),
        click.option(
            "--log-dir",
            envvar="JOBD_LOG_DIR",
            type=click.Path(path_type=Path),
            help="Where events.jsonl and job logs go. [default: ~/jobd/logs]",
        ),
        click.option(
            "--projects",
            envvar="JOBD_PROJECTS",
            type=click.Path(path_type=Path),
            help="A projects.yaml to load and keep applied.",
        ),
        click.option(
            "--auto-preempt-queued",
            envvar="JOBD_AUTO_PREEMPT_QUEUED_SECONDS",
            type=float,
            default=300,
            show_default=True,
            help="Seconds a job must wait for capacity before the sweeper preempts for it.",
        ),
        click.option(
            "--auto-preempt-min-runtime",
            envvar="JOBD_AUTO_PREEMPT_MIN_RUNTIME_SECONDS",
            type=float,
            default=300,
            show_default=True,
            help="Seconds a job must have run before the sweeper may preempt it.",
        ),
        click.option(
            "--sweep-interval",
            envvar="JOBD_SWEEP_INTERVAL_SECONDS",
            type=float,
            default=300,
            show_default=True,
            help="Full resync period (timers do not wait for it).",
        ),
        click.option(
            "--lost-timeout",
            envvar="JOBD_LOST_TIMEOUT_SECONDS",
            type=float,
            default=300,
            show_default=True,
            help="Seconds a job may stay Lost before it is Failed.",
        ),
        click.option(
            "--finished-job-ttl",
            envvar="JOBD_FINISHED_JOB_TTL_S",
            type=_duration(),
            default=None,
            help=(
                "Remove a finished job, its logs and its events this long after it ended "
                "(90, 10m, 2h, 30d), unless the job or its project says "
                "ttl_after_finished_s. [default: keep for ever]"
            ),
        ),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def worker_options(f: F) -> F:
    options = [
        click.option(
            "--name",
            envvar="JOBD_WORKER_NAME",
            default=socket.gethostname,
            callback=_name_option,
            help="Worker identity, lower-cased (GPU-Box.lab is gpu-box.lab). [default: hostname]",
        ),
        click.option(
            "--slots",
            envvar="JOBD_WORKER_SLOTS",
            type=click.IntRange(min=1),
            help=(
                "Concurrent CPU-only jobs (a GPU job takes its GPUs, no slot). "
                "[default: number of GPUs, else 1]"
            ),
        ),
        click.option(
            "--gpus",
            envvar="JOBD_WORKER_GPUS",
            callback=_gpus_option,
            help=(
                "GPU indices to hand out, e.g. 0,1, or with each one's memory, "
                "0:24GiB,1:80GiB, or 'none'; checked against NVML or nvidia-smi where they "
                "answer. [default: from NVML, else nvidia-smi]"
            ),
        ),
        click.option(
            "--checkpoint-root",
            envvar="JOBD_WORKER_CHECKPOINT_ROOT",
            help=(
                "Checkpoint root. [default: $XDG_DATA_HOME/jobd/checkpoints "
                "or ~/.local/share/jobd/checkpoints]"
            ),
        ),
        click.option(
            "--default-grace",
            envvar="JOBD_WORKER_DEFAULT_GRACE_S",
            type=click.FloatRange(0, 300),
            default=60,
            show_default=True,
            help="Grace for jobs whose spec and project say none.",
        ),
        click.option(
            "--remove-checkpoints-after-days",
            "checkpoint_ttl_days",
            envvar="JOBD_WORKER_CHECKPOINT_TTL_DAYS",
            type=click.FloatRange(min=0),
            help=(
                "Remove checkpoint directories of jobs that ended more than this many days "
                "ago and that no unfinished job resumes from. [default: keep everything]"
            ),
        ),
        click.option(
            "--state-dir",
            envvar="JOBD_WORKER_STATE_DIR",
            type=click.Path(path_type=Path),
            help=(
                "The worker's own state: a directory per job attempt (its supervisor's files, "
                "output, exit status) under jobs/. [default: <data-dir>/worker/<name>]"
            ),
        ),
        click.option(
            "--keep-job-files",
            envvar="JOBD_WORKER_KEEP_JOB_FILES",
            is_flag=True,
            help="Keep a job's state directory (and output) once it is over and shipped.",
        ),
        click.option(
            "--lease",
            "lease_s",
            envvar="JOBD_WORKER_LEASE_SECONDS",
            # The broker's bounds (api.models MIN_LEASE_S, MAX_LEASE_S; not imported here,
            # to keep pydantic out of `jobd --help`): refused at start, not at registration.
            type=click.FloatRange(min=1, max=3600),
            default=15,
            show_default=True,
            help="Lease duration, 1 to 3600 s; renewed every third of it.",
        ),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def _duration() -> click.ParamType[float]:
    from jobd.cli.durations import Duration

    return Duration()


def _broker_config(kw: dict[str, Any]) -> BrokerConfig:
    from jobd.broker.state import BrokerConfig
    from jobd.controllers.context import Settings

    data_dir = kw["data_dir"] or _default_data_dir()
    return BrokerConfig(
        data_dir=data_dir,
        log_dir=kw["log_dir"] or Path.home() / "jobd" / "logs",
        db_url=kw["db"],
        token=kw["token"] or None,
        projects_file=kw["projects"],
        max_log_bytes=kw["max_log_bytes"],
        settings=Settings(
            auto_preempt_queued_s=kw["auto_preempt_queued"],
            auto_preempt_min_runtime_s=kw["auto_preempt_min_runtime"],
            sweep_interval_s=kw["sweep_interval"],
            lost_timeout_s=kw["lost_timeout"],
            finished_job_ttl_s=kw["finished_job_ttl"],
        ),
    )


def _worker_settings(kw: dict[str, Any]) -> WorkerSettings:
    from jobd.worker.checkpoints import checkpoint_root
    from jobd.worker.execution import WorkerSettings

    given = click.get_current_context().meta.get(_NAME_GIVEN)
    if given is not None:
        _log().info("worker_name_normalised", worker=kw["name"], given=given)
    gpus = _host_gpus(kw["gpus"])
    env = dict(os.environ)
    if kw["checkpoint_root"]:
        env["JOBD_WORKER_CHECKPOINT_ROOT"] = kw["checkpoint_root"]
    data_dir = kw.get("data_dir") or _default_data_dir()
    state_dir = kw["state_dir"] or data_dir / "worker" / kw["name"]
    return WorkerSettings(
        name=kw["name"],
        slots=kw["slots"] or max(1, len(gpus)),
        gpus=sorted(gpus),
        gpu_memory={g: m for g, m in gpus.items() if m is not None},
        checkpoint_root=checkpoint_root(env),
        default_grace_s=kw["default_grace"],
        state_dir=state_dir,
        checkpoint_ttl_days=kw["checkpoint_ttl_days"],
        max_log_bytes=kw["max_log_bytes"],
        keep_job_files=kw["keep_job_files"],
    )


def _host_gpus(declared: Gpus | None) -> Gpus:
    """The GPUs to hand out, with their memory: declared or detected (NVML, nvidia-smi),
    checked against what the host has."""
    from jobd.cli.worker_host import check_gpus, detect_gpus

    gpus, warning = check_gpus(declared, detect_gpus())
    if warning:
        _log().warning("gpu_detection_failed", message=warning)
    return gpus


def _server(app: Any, host: str, port: int) -> uvicorn.Server:
    import uvicorn  # here, not at the top: `jobd worker` serves nothing

    class _QuietServer(uvicorn.Server):
        """uvicorn without its own signal handling: `jobd dev` stops in order."""

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

    config = uvicorn.Config(
        app,
        host=host,
        port=port,
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


def _run(main: Callable[[], Awaitable[None]], uvloop: bool = False) -> None:
    """Run the program's loop; the broker alone may use uvloop.

    uvloop serves HTTP faster. The programs that run workloads (worker, dev) stay on
    asyncio's loop: workloads once started several times slower under uvloop. They now
    start with a plain Popen (runner/base.py), so that reason is worth measuring again.
    """
    if uvloop:
        try:
            import uvloop as _  # noqa: F401  (installed by uvicorn[standard])
        except ImportError:
            uvloop = False
    _tune_gc()
    anyio.run(main, backend_options={"use_uvloop": uvloop})


def _tune_gc() -> None:
    """Fewer cyclic garbage collections for a long-running server.

    Each request allocates thousands of short-lived objects (pydantic models, rows,
    dicts); at CPython's default of a young collection every 700 allocations, the
    collector took a quarter of a create's CPU. What exists at start-up (modules, the
    app) is frozen out of every later collection; garbage is still collected, in larger
    and rarer young passes.
    """
    gc.collect()
    gc.freeze()
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


@cli.command()
@broker_options
@max_log_bytes_option
def broker(**kw: Any) -> None:
    """Run the control plane: HTTP API, store, reconcile loops."""
    from jobd.broker.app import create_app
    from jobd.logconfig import configure_logging

    config = _broker_config(kw)
    _refuse_weak_token(config, kw["host"])
    listener = _listen(kw["host"], kw["port"])  # before the store is opened
    configure_logging("broker")
    app = create_app(config)
    server = _server(app, kw["host"], kw["port"])
    _say_where(config, kw["host"], kw["port"])

    async def run() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(server.serve, [listener])
            with anyio.CancelScope() as waiting:
                await _until_signalled(waiting)
            _stop_broker(app, server)

    _run(run, uvloop=True)
    click.echo("jobd: stopped", err=True)


def _stop_broker(app: Any, server: uvicorn.Server) -> None:
    app.state.broker.release_waiters()
    server.should_exit = True


@cli.command()
@click.option(
    "--server",
    envvar="JOBD_URL",
    default="http://127.0.0.1:8765",
    show_default=True,
    help="The broker's URL.",
)
@click.option(
    "--token", envvar="JOBD_TOKEN", help="Bearer token. [default: <data-dir>/admin.token]"
)
@click.option(
    "--token-file",
    envvar="JOBD_TOKEN_FILE",
    type=click.Path(path_type=Path),
    help="Read the token from this file, mode 0600 (a systemd credential works): "
    "preferred to --token, which the agent's environment would show.",
)
@click.option(
    "--log-dir",
    envvar="JOBD_LOG_DIR",
    type=click.Path(path_type=Path),
    help="Not used by the worker: job output lives in its --state-dir. [default: ~/jobd/logs]",
)
@worker_options
@max_log_bytes_option
def worker(server: str, token: str | None, token_file: Path | None, **kw: Any) -> None:
    """Run the agent on this host: runs the jobs bound to it, reports what it sees."""
    _without_rich()
    from jobd.http import default_token
    from jobd.logconfig import configure_logging
    from jobd.worker.agent import Agent

    token = _worker_token(server, token, token_file) or default_token(server)
    _forget_token()
    configure_logging("worker")
    settings = _worker_settings(kw)
    agent = Agent(server, token, settings, lease_duration_s=kw["lease_s"])

    async def run() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_until_signalled, tg.cancel_scope)
            await agent.run()  # on a signal: cancelled; its jobs run on

    _run(run)
    _say_jobs_run_on(agent)


@cli.command()
@broker_options
@worker_options
@max_log_bytes_option
def dev(**kw: Any) -> None:
    """Broker and one worker in one process, on embedded SQLite: everything on one machine."""
    from jobd.broker.app import create_app
    from jobd.logconfig import configure_logging
    from jobd.worker.agent import Agent

    config = _broker_config(kw)
    _refuse_weak_token(config, kw["host"])
    listener = _listen(kw["host"], kw["port"])  # before the store is opened
    _forget_token()
    configure_logging("dev")
    app = create_app(config)
    token = app.state.broker.token
    settings = _worker_settings(kw)
    url = f"http://{kw['host']}:{kw['port']}"
    server = _server(app, kw["host"], kw["port"])
    agent = Agent(url, token, settings, lease_duration_s=kw["lease_s"])
    _say_where(config, kw["host"], kw["port"], settings)

    async def both() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(server.serve, [listener])
            while not server.started:
                if server.should_exit:
                    raise SystemExit(1)
                await anyio.sleep(0.01)
            with anyio.CancelScope() as agent_scope:
                async with anyio.create_task_group() as worker_tg:
                    worker_tg.start_soon(_until_signalled, agent_scope)
                    await agent.run()
            # The worker has stopped (its jobs run on); now the broker.
            _stop_broker(app, server)

    _run(both)
    _say_jobs_run_on(agent)
    _log().info("stopped")


def _refuse_weak_token(config: BrokerConfig, host: str) -> None:
    """Before anything is opened or bound: beyond loopback, a short admin token is refused."""
    from jobd.broker.tokens import weak_token_refusal

    token = config.token
    path = config.data_dir / "admin.token"
    if token is None and path.is_file():
        token = path.read_text().strip()
    refusal = weak_token_refusal(host, token)
    if refusal is not None:
        click.echo(refusal, err=True)
        raise SystemExit(2)


def _listen(host: str, port: int) -> socket.socket:
    """The bound socket the broker will serve on; a taken port ends jobd here, in a line."""
    from jobd.cli.listening import ListenError, bind_listener

    try:
        return bind_listener(host, port)
    except ListenError as exc:
        click.echo(f"jobd: {exc}", err=True)
        raise SystemExit(1) from None


def _worker_token(server: str, token: str | None, token_file: Path | None) -> str | None:
    """The token file's token when one is given (refused unless mode 0600), else --token."""
    from jobd.cli.credentials import TokenFileError, read_token_file
    from jobd.discovery import TokenError, usable_token

    try:
        if token_file is None:
            return usable_token(token)
        return read_token_file(token_file.expanduser())
    except (TokenFileError, TokenError) as exc:
        click.echo(f"jobd worker: {exc}", err=True)
        raise SystemExit(2) from None


def _forget_token() -> None:
    """No child of this process inherits the token (nor the file's name).

    Popping it from os.environ also unsets it in the C environment every child is
    started with. The kernel still shows the environment this process *started* with in
    /proc/PID/environ, which is why a worker should be given --token-file instead.
    """
    for name in ("JOBD_TOKEN", "JOBD_TOKEN_FILE"):
        os.environ.pop(name, None)


def _say_jobs_run_on(agent: Agent) -> None:
    """Stopping jobd stops no job: say how many run on, to be re-adopted at the next start."""
    running = agent.running_jobs()
    _log().info("jobs_keep_running", jobs=running, state_dir=str(agent.settings.state_dir))
    if running:
        noun = "job keeps" if running == 1 else "jobs keep"
        click.echo(f"{running} {noun} running; the next start re-adopts them.", err=True)


def _gpu_label(index: int, memory: dict[int, int]) -> str:
    """`0:24GiB`, or `0` where the GPU's memory is not known."""
    from jobd.api.sizes import format_size

    return f"{index}:{format_size(memory[index])}" if index in memory else str(index)


def _say_where(
    config: BrokerConfig, host: str, port: int, worker: WorkerSettings | None = None
) -> None:
    from jobd.logconfig import redact_url

    lines = [
        f"jobd listening on http://{host}:{port}",
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


@cli.command()
@click.option("--server", envvar="JOBD_URL", help="Benchmark this broker instead of starting one.")
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


if __name__ == "__main__":
    main()
