"""`job`: the user's command line (CONTRACT.md §4).

Thin on purpose: each verb parses its arguments, makes one or a few calls through
`jobd.http.JobdClient`, and hands the documents to `jobd.cli.render`. Every failure a user
can cause or meet ends as one sentence on stderr, `error: ...`, and a non-zero exit code
(failure.py): 1 for a refusal or something not found, 2 for bad usage (an unknown option
included, on every verb); never a traceback. `job wait`'s codes are in waiting.py.

Here: the group and its options, apply, diff and submit. The verbs that show things are
in reading.py, those that follow in streams.py, those acting on jobs in acting.py, those
acting on workers in drain.py.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
import httpx

from jobd.api.manifests import ManifestError
from jobd.api.models import DEFAULT_PROJECT, MAX_GRACE_S
from jobd.cli import acting, config_verbs, drain, reading, render, streams
from jobd.cli.config_verbs import complete_context
from jobd.cli.failure import DiffFailure, Failure
from jobd.cli.manifest_files import load_manifests
from jobd.cli.options import output_option, print_documents
from jobd.cli.submit import SubmitError, build_submit_job
from jobd.cli.waiting import exit_with, wait_all
from jobd.http import (
    ApiError,
    ApplyResult,
    BrokerUnreachable,
    Document,
    JobdClient,
    default_server,
)

__all__ = ["Settings", "SubmitError", "build_submit_job", "cli", "main", "printed_name"]


@dataclass
class Settings:
    """What every verb needs to reach the broker; tests may preset `transport`."""

    server: str = field(default_factory=default_server)
    token: str | None = None
    transport: httpx.BaseTransport | None = None

    def client(self) -> JobdClient:
        return JobdClient(self.server, self.token, transport=self.transport)


class _UsageFailure(Failure):
    """Bad usage of a verb: click's exit code, in the one-line form of every error."""

    exit_code = 2


class _JobGroup(click.Group):
    """Turns the client's and the manifests' errors, and a verb's bad usage, into one
    `error: ...` line."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (ApiError, BrokerUnreachable) as exc:
            raise Failure(exc.message) from None
        except ManifestError as exc:
            raise Failure(str(exc)) from None
        except click.UsageError as exc:
            raise _UsageFailure(_usage_sentence(exc)) from None
        except KeyboardInterrupt:
            # Ctrl-C is how a user ends -w and -f: leave quietly, as a shell expects.
            click.echo("", err=True)
            ctx.exit(130)


def _usage_sentence(exc: click.UsageError) -> str:
    """click's usage error as one line, with where to read more."""
    message = exc.format_message()
    where = exc.ctx.command_path if exc.ctx is not None else "job"
    return f"{message[:1].lower()}{message[1:]} (see '{where} -h')"


def _check_server(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    if value is not None and not value.startswith(("http://", "https://")):
        raise click.BadParameter(f"{value!r} is not an http:// or https:// URL")
    return value


@click.group(cls=_JobGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--server",
    envvar="JOBD_URL",
    callback=_check_server,
    show_envvar=True,
    help="The broker's URL [default: the context's, else http://127.0.0.1:8765].",
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
    shell_complete=complete_context,
    help="Use this context of the config file (job config -h) [default: its current one].",
)
@click.version_option(package_name="jobd", prog_name="job", message="%(prog)s %(version)s")
@click.pass_context
def cli(ctx: click.Context, /, **connection: Any) -> None:
    """Submit and manage jobs on a jobd broker."""
    if ctx.invoked_subcommand in config_verbs.STANDALONE:
        return  # they must work while the config file is broken: they are how it is fixed
    settings = ctx.ensure_object(Settings)
    from jobd.cli.contexts import ConfigError, resolve_connection

    try:
        chosen = resolve_connection(**connection)
    except ConfigError as exc:
        raise Failure(str(exc)) from None
    settings.server, settings.token = chosen.server, chosen.token
    if chosen.project:  # click's own defaults, below any flag or environment variable
        ctx.default_map = {verb: {"project": chosen.project} for verb in ("submit", "get")}


pass_settings = click.make_pass_decorator(Settings)


def main() -> None:
    """The `job` console script."""
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
    documents = load_manifests(files)  # before connecting: a bad file sends nothing
    with settings.client() as client:
        results = client.apply(documents, dry_run=dry_run, objects=output != "text")
    if output != "text":
        print_documents([_applied(r) for r in results], output)
        return
    suffix = " (dry run)" if dry_run else ""
    for result in results:
        click.echo(f"{printed_name(result.kind, result.name)} {result.action}{suffix}")


def printed_name(kind: str, name: str) -> str:
    """`job/hello` in the default project, `job/PROJECT/NAME` elsewhere, `project/NAME`."""
    project, _, short = name.rpartition("/")
    if kind == "Job" and project and project != DEFAULT_PROJECT:
        return f"job/{project}/{short}"
    return f"{kind.lower()}/{short}"


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
    except (ApiError, BrokerUnreachable) as exc:
        raise DiffFailure(exc.message) from None
    except ManifestError as exc:
        raise DiffFailure(str(exc)) from None
    click.echo(text, nl=False)
    sys.exit(1 if text else 0)


def _diff_all(settings: Settings, files: Sequence[str]) -> str:
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
    if kind == "Job":
        project, _, job_name = name.rpartition("/")
        return client.find_job(project or "default", job_name)
    lists = {"Project": client.list_projects, "Worker": client.list_workers}
    items = lists[kind]() if kind in lists else []
    return next((d for d in items if d.get("metadata", {}).get("name") == name), None)


# -- submit ----------------------------------------------------------------------------------


# Options end at `--` or at the command's first word; everything after that word is the
# command's, its flags included. Before it, an option `submit` does not know is an error.
_COMMAND_ARGS = {"allow_interspersed_args": False}


@cli.command(context_settings=_COMMAND_ARGS)
@click.option("-p", "--project", default="default", show_default=True, help="The job's project.")
@click.option("--cwd", default=".", show_default=True, help="Working directory (made absolute).")
@click.option("--name", help="Name, unique in the project [default: the broker picks one].")
@click.option("--priority", type=int, help="Priority [default: the project's].")
@click.option(
    "--preemptible/--no-preemptible",
    default=None,
    help="Whether higher priority work may preempt it [default: the project's].",
)
@click.option(
    "--checkpoint-grace",
    type=float,
    metavar="S",
    help=f"Seconds from SIGTERM to SIGKILL on preemption, at most {MAX_GRACE_S}.",
)
@click.option("--gpus", type=int, metavar="N", help="GPUs the job takes (one slot each).")
@click.option(
    "--depends-on",
    multiple=True,
    metavar="ID",
    help="Start only after this job (id, or name in the project) succeeds; repeatable.",
)
@click.option(
    "--depends-on-any-exit", is_flag=True, help="Start once the dependencies end, however."
)
@click.option("--env", multiple=True, metavar="K=V", help="Environment variable; repeatable.")
@click.option(
    "--export",
    multiple=True,
    metavar="VARS|ALL",
    help="Copy these variables of your environment (comma-separated), or ALL of them, "
    "into the job's env, as sbatch --export [default: none].",
)
@click.option("--shell", metavar="'CMD'", help="Run CMD through `sh -c` (pipes, globs, &&).")
@click.option("--resume-from", metavar="PATH", help="Set RESUME_FROM for the workload.")
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

    \b
    Examples:
      job submit -p long-training --gpus 1 -- python train.py --lr 3e-4
      job submit --shell 'python prep.py | gzip > data.gz'
    """
    try:
        document = build_submit_job(command, **options)
    except SubmitError as exc:
        raise Failure(str(exc)) from None
    with settings.client() as client:
        created = client.create_job(document)
        job_id = int(created["metadata"]["id"])
        if output == "text":
            click.echo(job_id)
        else:
            print_documents([created], output, single=True)
        if wait:
            sys.stdout.flush()  # the id is useful before the wait ends
            exit_with(wait_all(client, [job_id], None))


for _verbs in (reading.VERBS, streams.VERBS, acting.VERBS, drain.VERBS, config_verbs.VERBS):
    for _verb in _verbs:
        cli.add_command(_verb)
