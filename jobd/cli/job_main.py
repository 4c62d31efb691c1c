"""`job`: the user's command line (CONTRACT.md §4).

Thin on purpose: each verb parses its arguments, makes one or a few calls through
`broker_client.JobdClient`, and hands the documents to `jobd.cli.render`. Every failure a user
can cause or meet ends as one sentence on stderr, `error: ...`, and a non-zero exit code
(failure.py): 1 for a refusal or something not found, 2 for bad usage (an unknown option
included, on every verb); never a traceback. `job wait`'s codes are in waiting.py.

Here: the group and its options, apply, diff and submit. The verbs that show things are
in reading.py, those that follow in streams.py, those acting on jobs in acting.py, those
acting on workers in drain.py. The group loads a verb's module only when that verb is
run (or `--help` lists them all), and no module here does work or loads httpx, rich,
pydantic or ruamel.yaml when imported: each verb pays only for what it uses, so `job get`
answers in about 100 ms (docs/performance.md).
"""

from __future__ import annotations

import gc
import importlib
import sys
from collections.abc import Sequence
from gettext import gettext
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from jobd.api.vocabulary import DEFAULT_PROJECT
from jobd.cli.failure import DiffFailure, Failure
from jobd.cli.options import output_option, print_documents
from jobd.cli.submit_options import SpecCommand
from jobd.discovery import (
    DEFAULT_SERVER,
    TokenError,
    config_path,
    default_server,
    default_token,
    local_socket,
    usable_token,
)
from jobd.wire.errors import ApiError, BrokerUnreachable

if TYPE_CHECKING:
    import httpx
    from click.shell_completion import CompletionItem

    from jobd.cli.broker_client import ApplyResult, Document, JobdClient

__all__ = ["VERB_MODULES", "VERB_SUMMARIES", "Settings", "cli", "main", "printed_name"]

# The verbs defined elsewhere: the module whose VERBS holds each, and the first paragraph of
# its help, from which `job --help` summarises it without importing the module (a test holds
# each summary to the verb's own help).
_LAZY_VERBS = {
    "get": ("reading", "List jobs (or projects, workers), or show some."),
    "describe": ("reading", "Show jobs' spec, status, conditions and events."),
    "status": ("reading", "Show the jobs still converging, and since when."),
    "workers": ("reading", "List workers, their capacity, lease and jobs (as `job get workers`)."),
    "logs": ("streams", "Print a job's output (stdout and stderr, as captured)."),
    "events": ("streams", "Print events, from the same records as events.jsonl."),
    "cancel": ("acting", "Stop jobs, queued or running; each ends Cancelled."),
    "delete": (
        "acting",
        "Remove jobs that have ended (cancel a live one first), and their output.",
    ),
    "preempt": ("acting", "Request preemption of running jobs."),
    "preempt-blockers": ("acting", "Preempt what keeps a queued job from running."),
    "explain": (
        "explaining",
        "Say why a queued job is not running: each worker, its queue place, preemption.",
    ),
    "rerun": ("acting", "Submit a copy of a job that has ended, as a new job; print its id."),
    "resume": ("acting", "Resubmit preempted jobs from their checkpoints."),
    "wait": (
        "acting",
        "Block until jobs end (each member of an array A<id>); exit with what ended them.",
    ),
    "cordon": ("drain", "Place no new job on WORKER; the jobs running there go on."),
    "uncordon": ("drain", "Place jobs on WORKER again."),
    "drain": ("drain", "Cordon WORKER, then wait until no job is bound to it."),
    "config": ("config_verbs", "Contexts: named brokers with their token files, as kubeconfig's."),
    "completion": (
        "config_verbs",
        "Print the shell completion script for bash, zsh or fish (click's own).",
    ),
    "ui": ("dashboard", "Print (and open) a login URL for the web dashboard at /ui."),
    "usage": ("usage", "Show fair share: each project's and user's usage, share and factor."),
    "top": (
        "top",
        "Show workers and their GPUs, running jobs, the queue and preemptions, live.",
    ),
    "whoami": (
        "whoami",
        "Show who the broker knows you as: user, uid, groups, admin or not, and how.",
    ),
}
VERB_MODULES = {verb: module for verb, (module, _) in _LAZY_VERBS.items()}
VERB_SUMMARIES = {verb: summary for verb, (_, summary) in _LAZY_VERBS.items()}
# Verbs that must work while the config file is broken: they are how it is fixed.
STANDALONE = frozenset({"completion", "config"})


class Settings:
    """What every verb needs to reach the broker; tests may preset `transport`."""

    def __init__(
        self,
        server: str | None = None,
        token: str | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.server = default_server() if server is None else server
        self.token = token
        self.transport = transport

    def client(self) -> JobdClient:
        from jobd.cli.broker_client import JobdClient

        return JobdClient(self.server, self.token, transport=self.transport)


class _UsageFailure(Failure):
    """Bad usage of a verb: click's exit code, in the one-line form of every error."""

    exit_code = 2


class _JobGroup(click.Group):
    """Loads each verb's module when the verb is asked for; turns the client's and the
    manifests' errors, and a verb's bad usage, into one `error: ...` line."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *VERB_MODULES})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in VERB_MODULES:
            module = importlib.import_module(f"jobd.cli.{VERB_MODULES[cmd_name]}")
            for verb in module.VERBS:
                self.add_command(verb)
        return self.commands.get(cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """click's listing of the verbs, each verb not loaded summarised from
        VERB_SUMMARIES as click would its help: `job --help` imports no verb's module."""
        listed = [(name, self.commands.get(name)) for name in self.list_commands(ctx)]
        shown = [(name, verb) for name, verb in listed if verb is None or not verb.hidden]
        limit = formatter.width - 6 - max(len(name) for name, _ in shown)
        rows = [
            (name, _summary(name, limit) if verb is None else verb.get_short_help_str(limit))
            for name, verb in shown
        ]
        with formatter.section(gettext("Commands")):
            formatter.write_dl(rows)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.UsageError as exc:
            raise _UsageFailure(_usage_sentence(exc)) from None
        except KeyboardInterrupt:
            # Ctrl-C is how a user ends -w and -f: leave quietly, as a shell expects.
            click.echo("", err=True)
            ctx.exit(130)
        except Exception as exc:
            message = _refusal(exc)
            if message is None:
                raise
            raise Failure(message) from None


def _summary(verb: str, limit: int) -> str:
    """The verb's summary, shortened by click as it shortens a loaded verb's help."""
    return click.Command(verb, help=VERB_SUMMARIES[verb]).get_short_help_str(limit)


def _refusal(exc: Exception) -> str | None:
    """The one sentence of the broker's refusal, of an unreachable broker or of a bad
    manifest; None for any other exception."""
    if isinstance(exc, ApiError | BrokerUnreachable):
        return exc.message
    if isinstance(exc, TokenError):
        return str(exc)
    if isinstance(exc, ValueError):  # loaded already by whatever read a manifest
        from jobd.api.manifests import ManifestError

        if isinstance(exc, ManifestError):
            return str(exc)
    return None


def _usage_sentence(exc: click.UsageError) -> str:
    """click's usage error as one line, with where to read more."""
    message = exc.format_message()
    where = exc.ctx.command_path if exc.ctx is not None else "job"
    return f"{message[:1].lower()}{message[1:]} (see '{where} -h')"


def _check_server(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    """One broker's URL, or several comma-separated (failed over between)."""
    for url in [] if value is None else value.split(","):
        if not url.strip().startswith(("http://", "https://", "unix:///")):
            raise click.BadParameter(f"{url!r} is not an http://, https:// or unix:///PATH URL")
    return value


def _complete_context(
    ctx: click.Context, param: click.Parameter, incomplete: str
) -> list[CompletionItem]:
    from jobd.cli.config_verbs import complete_context

    return complete_context(ctx, param, incomplete)


@click.group(cls=_JobGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--server",
    envvar="JOBD_URL",
    callback=_check_server,
    show_envvar=True,
    help="The broker's URL, or unix:///PATH for its Unix socket; several, comma-separated, "
    "to fail over between brokers [default: the context's, else JOBD_SOCKET, else a local "
    "broker's socket when no token is given, else http://127.0.0.1:8765].",
)
@click.option(
    "--token",
    envvar="JOBD_TOKEN",
    show_envvar=True,
    help="Bearer token [default: the context's token file, else a local broker's "
    "<data dir>/admin.token].",
)
@click.option(
    "--token-file",
    envvar="JOBD_TOKEN_FILE",
    show_envvar=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="Read the token from this file (mode 0600).",
)
@click.option(
    "--context",
    "context_name",
    envvar="JOBD_CONTEXT",
    show_envvar=True,
    shell_complete=_complete_context,
    help="Use this context of the config file (job config -h) [default: its current one].",
)
@click.version_option(package_name="jobd", prog_name="job", message="%(prog)s %(version)s")
@click.pass_context
def cli(ctx: click.Context, /, **connection: Any) -> None:
    """Submit and manage jobs on a jobd broker."""
    if ctx.invoked_subcommand in STANDALONE:
        return
    settings = ctx.ensure_object(Settings)
    connection["token"] = _stripped(connection["token"])
    if connection["context_name"] is None and not config_path().exists():
        # No contexts: no YAML or pydantic to load, the common case kept fast.
        settings.server = connection["server"] or _socket_or_default(connection)
        settings.token = _token(connection["token"], connection["token_file"], settings.server)
        return
    from jobd.cli.contexts import ConfigError, resolve_connection

    try:
        chosen = resolve_connection(**connection)
    except ConfigError as exc:
        raise Failure(str(exc)) from None
    settings.server, settings.token = chosen.server, chosen.token
    if chosen.project:  # click's own defaults, below any flag or environment variable
        ctx.default_map = {verb: {"project": chosen.project} for verb in ("submit", "get")}


def _socket_or_default(connection: dict[str, Any]) -> str:
    """No server said: the local broker's socket (discovery.local_socket), else TCP."""
    configured = connection["token"] is not None or connection["token_file"] is not None
    return local_socket(configured) or DEFAULT_SERVER


def _stripped(token: str | None) -> str | None:
    """--token (or JOBD_TOKEN) without the whitespace around it; refused, in a sentence that
    never shows it, when what is left cannot be a token."""
    try:
        return usable_token(token)
    except TokenError as exc:
        raise Failure(str(exc)) from None


def _token(token: str | None, token_file: Path | None, server: str) -> str | None:
    if token_file is not None:  # wins over --token, as it does for `jobd worker`
        from jobd.cli.credentials import TokenFileError, read_token_file

        try:
            return read_token_file(token_file)
        except TokenFileError as exc:
            raise Failure(str(exc)) from None
    return token or default_token(server)


pass_settings = click.make_pass_decorator(Settings)


def main() -> None:
    """The `job` console script."""
    # What is loaded by now lives as long as the command: kept out of every collection,
    # and the collector run less often, as the daemons do (daemon/main.py). A short
    # command pays ~5 % fewer instructions; a long one (-w, -f, wait) still collects.
    gc.freeze()
    gc.set_threshold(20_000, 20, 20)
    gc.enable()  # held off while the command loaded (job_script.py)
    # httpx imports its own command-line client (pygments, a third of httpx's import time)
    # when rich is installed; `job` never runs it. Marked absent, httpx goes without it,
    # as `jobd` does for the worker (daemon/main._without_rich).
    sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]
    cli(prog_name="job")


# -- apply, diff -----------------------------------------------------------------------------

_FILES = click.option(
    "-f",
    "--filename",
    "files",
    multiple=True,
    required=True,
    help="A manifest file, a directory of them, or - for stdin; repeatable.",
)


@cli.command()
@_FILES
@click.option("--dry-run", is_flag=True, help="Validate and report; change nothing.")
@output_option("text")
@pass_settings
def apply(settings: Settings, files: tuple[str, ...], dry_run: bool, output: str) -> None:
    """Create or update the Jobs and Projects in manifests.

    Prints `job/NAME created|configured|unchanged` (`job/PROJECT/NAME` outside the
    default project) and `project/NAME ...`: names `job get` and the other verbs take.
    A directory's hidden entries and files that are not jobd manifests are skipped,
    with a note on stderr.
    """
    from jobd.cli.manifest_files import load_manifests

    documents = load_manifests(files)  # before connecting: a bad file sends nothing
    with settings.client() as client:
        results = client.apply(documents, dry_run=dry_run, objects=output != "text")
    if output != "text":
        print_documents([_applied(r) for r in results], output)
        return
    suffix = " (dry run)" if dry_run else ""
    # One write: 10,000 lines echoed one by one are 10,000 flushes.
    lines = [f"{printed_name(r.kind, r.name)} {r.action}{suffix}\n" for r in results]
    click.echo("".join(lines), nl=False)


def printed_name(kind: str, name: str) -> str:
    """`job/hello` in the default project, `job/PROJECT/NAME` elsewhere, `project/NAME`;
    an array as `array/NAME`, as a job is."""
    project, _, short = name.rpartition("/")
    prefix = "array" if kind == "JobArray" else kind.lower()
    if kind in ("Job", "JobArray") and project and project != DEFAULT_PROJECT:
        return f"{prefix}/{project}/{short}"
    return f"{prefix}/{short}"


def _applied(result: ApplyResult) -> dict[str, Any]:
    found = {"kind": result.kind, "name": result.name, "action": result.action}
    return found | ({"object": result.object} if result.object is not None else {})


@cli.command()
@_FILES
@pass_settings
def diff(settings: Settings, files: tuple[str, ...]) -> None:
    """Diff live objects against what apply would make.

    Exit 0 when there are no differences, 1 when there are some, 2 on error.
    """
    try:
        text = _diff_all(settings, files)
    except Exception as exc:
        message = _refusal(exc)
        if message is None:
            raise
        raise DiffFailure(message) from None
    click.echo(text, nl=False)
    sys.exit(1 if text else 0)


def _diff_all(settings: Settings, files: Sequence[str]) -> str:
    from jobd.cli import render
    from jobd.cli.manifest_files import load_manifests

    documents = load_manifests(files)
    with settings.client() as client:
        results = client.apply(documents, dry_run=True)
        return "".join(
            render.diff_text(
                _live(client, r.kind, r.name, r.action), r.object, r.kind, r.name, r.action
            )
            for r in results
            if r.object is not None
        )


def _live(client: JobdClient, kind: str, name: str, action: str) -> Document | None:
    """The stored object apply would change, or None when apply would create it."""
    if action == "created":
        return None
    if kind in ("Job", "JobArray"):
        project, _, short = name.rpartition("/")
        find = client.find_job if kind == "Job" else client.find_array
        return find(project or "default", short)
    lists = {"Project": client.list_projects, "Worker": client.list_workers}
    items = lists[kind]() if kind in lists else []
    return next((d for d in items if d.get("metadata", {}).get("name") == name), None)


# -- submit ----------------------------------------------------------------------------------


# Options end at `--` or at the command's first word; everything after that word is the
# command's, its flags included. Before it, an option `submit` does not know is an error.
_COMMAND_ARGS = {"allow_interspersed_args": False}


@cli.command(cls=SpecCommand, spec_after="name", context_settings=_COMMAND_ARGS)
@click.option("-p", "--project", default="default", show_default=True, help="The job's project.")
@click.option("--cwd", default=".", show_default=True, help="Working directory (made absolute).")
@click.option("--name", help="Name, unique in the project [default: the broker picks one].")
# Here, after --name: an option for each field of the job spec (api/field_options.py).
@click.option(
    "--export",
    multiple=True,
    metavar="VARS|ALL",
    help="Copy these variables of your environment (comma-separated), or ALL of them, "
    "into the job's env, as sbatch --export [default: none].",
)
@click.option("--shell", metavar="'CMD'", help="Run CMD through `sh -c` (pipes, globs, &&).")
@click.option("--resume-from", metavar="PATH", help="Set RESUME_FROM for the workload.")
@click.option(
    "--array",
    "indices",
    metavar="0-7|1,3,5|0-15:2[%N]",
    help="A job array: a member per index, `{i}` in COMMAND replaced by it; `%N`: at most N "
    "run at once; prints A<id>.",
)
@click.option(
    "--sweep",
    multiple=True,
    metavar="KEY=V1,V2",
    help="A sweep: a member per combination of the values (repeatable: their product), "
    "`{KEY}` in COMMAND replaced by the value as written; prints A<id>.",
)
@click.option("--wait", is_flag=True, help="Then wait for its end, and exit as `job wait` does.")
@output_option("text")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@pass_settings
def submit(
    settings: Settings, /, command: tuple[str, ...], wait: bool, output: str, **options: Any
) -> None:
    """Create a job running COMMAND; print its id.

    COMMAND is an argv, never run through a shell (--shell 'CMD' is, on purpose). Options
    end at `--` or at the command's first word: everything after it belongs to the command.
    With --array or --sweep it makes a job array, one job per member, and prints A<id>
    (`job get|wait|cancel|delete A<id>` act on all of them). A DURATION is 90, 45s, 10m,
    2h, 1d or 1h30m; a SIZE 40GiB, 80G or 40960MiB.

    \b
    Examples:
      job submit -p long-training --gpus 1 -- python train.py --lr 3e-4
      job submit --gpus 1 --gpu-memory 40GiB -- python finetune.py
      job submit --shell 'python prep.py | gzip > data.gz'
      job submit --array 0-7 -- python train.py --fold {i}
      job submit --sweep lr=1e-3,3e-4 --sweep seed=1,2,3 -- python train.py --lr {lr}
    """
    from jobd.cli.submit import SubmitError, as_array, build_submit_job
    from jobd.cli.waiting import exit_with, wait_all

    indices, sweep = options.pop("indices"), options.pop("sweep")
    try:
        document = build_submit_job(command, **options)
    except SubmitError as exc:
        raise Failure(str(exc)) from None
    if indices is not None or sweep:
        try:
            document = as_array(document, indices, sweep)
        except SubmitError as exc:  # a flag's value no array has: bad usage (exit 2)
            raise click.UsageError(str(exc)) from None
    if document["kind"] == "JobArray":
        _submit_array(settings, document, wait, output)
        return
    with settings.client() as client:
        created = client.create_job(document)
        job_id = int(created["metadata"]["id"])
        _warn_if_unschedulable(created)
        if output == "text":
            click.echo(job_id)
        else:
            print_documents([created], output, single=True)
        if wait:
            sys.stdout.flush()  # the id is useful before the wait ends
            exit_with(wait_all(client, [job_id], None, show=output == "text"))


def _submit_array(settings: Settings, document: Document, wait: bool, output: str) -> None:
    """Create the array with all its members; print `A<id>`, then wait for every member."""
    from jobd.cli.waiting import exit_with, wait_all

    with settings.client() as client:
        created = client.create_array(document)
        if output == "text":
            click.echo(f"A{created['metadata']['id']}")
        else:
            print_documents([created], output, single=True)
        if wait:
            sys.stdout.flush()
            exit_with(wait_all(client, created["status"]["jobs"], None))


def _warn_if_unschedulable(created: Document) -> None:
    """Say on stderr that no worker could run the job (it waits all the same)."""
    from jobd.cli import render

    said = render.unschedulable(created)
    if said is not None:
        click.echo(
            f"warning: job {created['metadata']['id']} is unschedulable: {said} "
            "(it waits, in case such a worker joins)",
            err=True,
        )
