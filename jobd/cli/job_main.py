"""`job`: the user's command line (CONTRACT.md §4).

Thin on purpose: each verb parses its arguments, makes one or a few calls through
`jobd.http.JobdClient`, and hands the documents to `jobd.cli.render`. Every failure a user
can cause or meet ends as one sentence on stderr, `error: ...`, and a non-zero exit code:
1 for a refusal or something not found, 2 for bad usage (and for `job diff` errors, whose 1
means "differences"); never a traceback.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import IO, Any, NoReturn

import click
import httpx

from jobd.api.manifests import ManifestError, dump_yaml, load_path, parse_resource
from jobd.api.models import BOUND_PHASES, MAX_GRACE_S, Phase, dump
from jobd.cli import drain, render
from jobd.cli.submit import SubmitError, build_submit_job
from jobd.http import (
    ApiError,
    BrokerUnreachable,
    Document,
    JobdClient,
    default_server,
    default_token,
)

__all__ = ["Settings", "SubmitError", "build_submit_job", "cli", "main"]

_TERMINAL = frozenset(p.value for p in Phase if p.terminal)
_LIVE = [p.value for p in Phase if not p.terminal]
_BOUND = [p.value for p in BOUND_PHASES]


class Failure(click.ClickException):
    """One sentence on stderr as `error: ...`; exit 1 unless told otherwise."""

    def show(self, file: IO[Any] | None = None) -> None:
        click.echo(f"error: {self.message}", err=True)


class DiffFailure(Failure):
    """`job diff` keeps 1 for "there are differences", so its errors exit 2, as kubectl's."""

    exit_code = 2


@dataclass
class Settings:
    """What every verb needs to reach the broker; tests may preset `transport`."""

    server: str = field(default_factory=default_server)
    token: str | None = None
    transport: httpx.BaseTransport | None = None

    def client(self) -> JobdClient:
        return JobdClient(self.server, self.token, transport=self.transport)


class _JobGroup(click.Group):
    """Turns the client's and the manifests' errors into `error: ...` lines."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (ApiError, BrokerUnreachable) as exc:
            raise Failure(exc.message) from None
        except ManifestError as exc:
            raise Failure(str(exc)) from None
        except KeyboardInterrupt:
            # Ctrl-C is how a user ends -w and -f: leave quietly, as a shell expects.
            click.echo("", err=True)
            ctx.exit(130)


def _check_server(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
    if not value.startswith(("http://", "https://")):
        raise click.BadParameter(f"{value!r} is not an http:// or https:// URL")
    return value


@click.group(cls=_JobGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--server",
    envvar="JOBD_URL",
    default=default_server,
    callback=_check_server,
    show_envvar=True,
    help="The broker's URL [default: http://127.0.0.1:8765].",
)
@click.option(
    "--token",
    envvar="JOBD_TOKEN",
    show_envvar=True,
    help="Bearer token [default: a local broker's <data dir>/admin.token].",
)
@click.pass_context
def cli(ctx: click.Context, server: str, token: str | None) -> None:
    """Submit and manage jobs on a jobd broker."""
    settings = ctx.ensure_object(Settings)
    settings.server = server
    settings.token = token or default_token(server)


pass_settings = click.make_pass_decorator(Settings)


def main() -> None:
    """The `job` console script."""
    cli(prog_name="job")


# -- shared helpers --------------------------------------------------------------------------


def _resolve(client: JobdClient, ref: str) -> int:
    """The id of `ref`: an integer id, `PROJECT/NAME`, or a NAME unique across projects."""
    if ref.isdigit():
        return int(ref)
    project, _, name = ref.rpartition("/")
    job = client.find_job(project or None, name)
    if job is None:
        where = f"in project {project!r}" if project else "in any project"
        raise Failure(f"no job named {name!r} {where}")
    return int(job["metadata"]["id"])


def _load_manifests(paths: Sequence[str]) -> list[Document]:
    """Every document of every file, validated here so an error names file and line.

    A relative `spec.cwd` means relative to where `job` runs, as `job submit --cwd` does:
    the worker cannot know the directory the user meant.
    """
    docs = [dump(parse_resource(doc)) for path in paths for doc in load_path(path)]
    for doc in docs:
        spec = doc.get("spec", {})
        if doc.get("kind") == "Job" and spec.get("cwd") and not os.path.isabs(spec["cwd"]):
            spec["cwd"] = os.path.abspath(spec["cwd"])
    return docs


def _print_documents(docs: list[Document], output: str, *, single: bool) -> None:
    if output == "json":
        click.echo(render.to_json(docs[0] if single else docs))
    else:
        click.echo(dump_yaml(docs), nl=False)


def _wait_terminal(client: JobdClient, job_id: int, timeout: float | None) -> Document:
    """Block until the job is terminal; a spinner on stderr only for a person watching."""
    job = client.get_job(job_id)
    meta = job["metadata"]
    deadline = None if timeout is None else time.monotonic() + timeout
    with _spinner(f"job/{job_id} {render.phase_text(job)}") as spinner:
        changes = client.job_changes(
            project=meta.get("project"), name=meta.get("name"), deadline=deadline
        )
        for op, current in changes:
            if current["metadata"].get("id") != job_id:
                continue  # an older job of the same name
            if op == "DELETED":
                raise Failure(f"job {job_id} was deleted before it finished")
            job = current
            if spinner is not None:
                spinner.update(f"job/{job_id} {render.phase_text(job)}")
            if job["status"].get("phase") in _TERMINAL:
                return job
    raise Failure(f"job {job_id} is still {render.phase_text(job)} after {timeout:g} s")


def _spinner(text: str) -> contextlib.AbstractContextManager[Any]:
    if not sys.stderr.isatty():
        return contextlib.nullcontext(None)
    return render.make_console(stderr=True).status(text)


def _finish(job: Document) -> NoReturn:
    """Exit as `job wait` does: 0 only for Succeeded, the final phase on stderr."""
    status = job["status"]
    phase = status.get("phase")
    code = status.get("exit_code")
    detail = f" (exit code {code})" if code else ""
    click.echo(f"job/{job['metadata']['id']} {phase}{detail}", err=True)
    sys.exit(0 if phase == Phase.SUCCEEDED else 1)


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
@pass_settings
def apply(settings: Settings, files: tuple[str, ...], dry_run: bool) -> None:
    """Create or update the Jobs and Projects in manifests."""
    documents = _load_manifests(files)  # before connecting: a bad file sends nothing
    with settings.client() as client:
        results = client.apply(documents, dry_run=dry_run, objects=False)
    suffix = " (dry run)" if dry_run else ""
    for result in results:
        name = result.name.rpartition("/")[2]  # CONTRACT.md §4: job/<name>, project/<name>
        click.echo(f"{result.kind.lower()}/{name} {result.action}{suffix}")


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
    documents = _load_manifests(files)
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


# Everything after the first word of the command is the command's, flags included.
_COMMAND_ARGS = {"ignore_unknown_options": True, "allow_interspersed_args": False}


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
@click.option("--resume-from", metavar="PATH", help="Set RESUME_FROM for the workload.")
@click.option("--wait", is_flag=True, help="Wait for the end; exit 0 only if it succeeded.")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@pass_settings
def submit(settings: Settings, /, command: tuple[str, ...], wait: bool, **options: Any) -> None:
    """Create a job running COMMAND; print its id.

    COMMAND is an argv, never run through a shell; everything after its first word
    belongs to it.

    \b
    Example:
      job submit -p long-training --gpus 1 -- python train.py --lr 3e-4
    """
    try:
        document = build_submit_job(command, **options)
    except SubmitError as exc:
        raise Failure(str(exc)) from None
    with settings.client() as client:
        job_id = int(client.create_job(document)["metadata"]["id"])
        click.echo(job_id)
        if wait:
            sys.stdout.flush()  # the id is useful before the wait ends
            _finish(_wait_terminal(client, job_id, None))


# -- reading ---------------------------------------------------------------------------------

_OUTPUT = click.option(
    "-o",
    "--output",
    type=click.Choice(["table", "wide", "json", "yaml"]),
    default="table",
    show_default=True,
    help="Output format.",
)


@cli.command()
@click.argument("ref", required=False, metavar="[ID|PROJECT/NAME]")
@_OUTPUT
@click.option("-p", "--project", help="Only the jobs of this project.")
@click.option("--phase", multiple=True, help="Only the jobs in this phase; repeatable.")
@click.option("-w", "--watch", is_flag=True, help="Then print a line per change, until Ctrl-C.")
@pass_settings
def get(
    settings: Settings,
    ref: str | None,
    output: str,
    project: str | None,
    phase: tuple[str, ...],
    watch: bool,
) -> None:
    """List jobs, or show one."""
    with settings.client() as client:
        if ref is not None:
            jobs = [client.get_job(_resolve(client, ref))]
        else:
            jobs = client.list_jobs(project=project, phase=phase).items
        _show_jobs(jobs, output, single=ref is not None)
        if watch:
            only = jobs[0]["metadata"] if ref is not None else {}
            changes = client.job_changes(
                project=only.get("project", project),
                name=only.get("name"),
                phases=phase,
                known=jobs,
            )
            for op, job in changes:
                _show_change(op, job, output)


def _show_jobs(jobs: list[Document], output: str, *, single: bool) -> None:
    if output in ("json", "yaml"):
        _print_documents(jobs, output, single=single)
    elif jobs:
        render.emit(render.make_console(), render.jobs_table(jobs, wide=output == "wide"))
    else:
        click.echo("No jobs found.", err=True)


def _show_change(op: str, job: Document, output: str) -> None:
    if output == "json":
        click.echo(render.to_json(job, compact=True))  # one document a line
    elif output == "yaml":
        click.echo("---\n" + dump_yaml([job]), nl=False)
    else:
        click.echo(render.watch_line(op, job))


@cli.command()
@click.argument("ref", metavar="ID")
@pass_settings
def describe(settings: Settings, ref: str) -> None:
    """Show a job's spec, status, conditions and events."""
    with settings.client() as client:
        job_id = _resolve(client, ref)
        job = client.get_job(job_id)
        events = list(client.iter_events(job=job_id))
    console = render.make_console()
    for block in render.describe_job(job, events):
        render.emit(console, block)


@cli.command()
@click.option(
    "-o", "--output", type=click.Choice(["text", "json"]), default="text", show_default=True
)
@pass_settings
def status(settings: Settings, output: str) -> None:
    """Show the jobs still converging, and since when.

    A job converges while its desired phase differs from its observed one, e.g.
    `7 Pending→Running 2m10s waiting for capacity`.
    """
    with settings.client() as client:
        jobs = client.list_jobs(phase=_LIVE).items
    converging = [j for j in jobs if j["status"].get("desired_phase") != j["status"].get("phase")]
    if output == "json":
        click.echo(render.to_json(converging))
    elif not converging:
        click.echo("Every job is in its desired phase.", err=True)
    else:
        for job in converging:
            click.echo(render.status_line(job))


@cli.command()
@click.argument("ref", metavar="ID")
@click.option("-f", "--follow", is_flag=True, help="Keep printing output until the job ends.")
@pass_settings
def logs(settings: Settings, ref: str, follow: bool) -> None:
    """Print a job's output (stdout and stderr, as captured)."""
    out = sys.stdout.buffer
    with settings.client() as client:
        job_id = _resolve(client, ref)
        offset = 0
        while True:
            chunk = client.read_logs(job_id, offset=offset, follow=follow)
            out.write(chunk.data)
            out.flush()
            offset = chunk.offset
            if chunk.done or (not follow and not chunk.data):
                return


@cli.command()
@click.option("--job", "ref", metavar="ID", help="Only the events of this job.")
@click.option("--type", "event_type", metavar="T", help="Only events of this type.")
@click.option("-f", "--follow", is_flag=True, help="Keep printing new events, until Ctrl-C.")
@click.option(
    "-o",
    "--output",
    type=click.Choice(["json", "table"]),
    default="json",
    show_default=True,
    help="json: one object a line, as in events.jsonl.",
)
@pass_settings
def events(
    settings: Settings, ref: str | None, event_type: str | None, follow: bool, output: str
) -> None:
    """Print events, from the same records as events.jsonl."""
    with settings.client() as client:
        job = _resolve(client, ref) if ref else None
        if not follow and output == "table":
            found = list(client.iter_events(job=job, event_type=event_type))
            render.emit(render.make_console(), render.events_table(found))
            return
        line = render.event_line if output == "json" else render.event_row_text
        after: int | None = None
        while True:
            page = client.events(job=job, event_type=event_type, after=after, follow=follow)
            for event in page.items:
                click.echo(line(event))
            if not follow and (not page.items or page.last in (None, after)):
                return
            after = page.last if page.last is not None else after


# -- acting on jobs --------------------------------------------------------------------------


@cli.command()
@click.argument("ref", metavar="ID")
@pass_settings
def preempt(settings: Settings, ref: str) -> None:
    """Request preemption of a running job.

    The worker sends SIGTERM, waits the job's checkpoint grace, then SIGKILLs it.
    """
    with settings.client() as client:
        job = client.preempt_job(_resolve(client, ref))
    click.echo(f"job/{job['metadata']['id']} preemption requested ({render.phase_text(job)})")


@cli.command("preempt-blockers")
@click.argument("ref", metavar="QUEUED_ID")
@click.option("--dry-run", is_flag=True, help="Only show which jobs would be preempted.")
@pass_settings
def preempt_blockers(settings: Settings, ref: str, dry_run: bool) -> None:
    """Preempt what keeps a queued job from running.

    Finds the running, preemptible, lower-priority job(s) whose slots would let the
    queued job start on one worker, and preempts them (or, with --dry-run, only says so).
    """
    with settings.client() as client:
        result = client.preempt_blockers(_resolve(client, ref), dry_run=dry_run)
    for victim in result.victims:
        click.echo(render.victim_line(victim))
    verb = "would preempt" if result.dry_run else "preempted"
    target = f" on {result.worker}" if result.worker else ""
    n = len(result.victims)
    click.echo(f"{verb} {n} job{'s' if n != 1 else ''} so job/{result.candidate} can run{target}")


@cli.command()
@click.argument("ref", metavar="ID")
@pass_settings
def cancel(settings: Settings, ref: str) -> None:
    """Stop a job, queued or running; it ends Cancelled."""
    with settings.client() as client:
        job = client.cancel_job(_resolve(client, ref))
    click.echo(f"job/{job['metadata']['id']} cancel requested ({render.phase_text(job)})")


@cli.command()
@click.argument("ref", metavar="ID")
@pass_settings
def delete(settings: Settings, ref: str) -> None:
    """Remove a job that has ended (cancel a live one first)."""
    with settings.client() as client:
        job_id = _resolve(client, ref)
        client.delete_job(job_id)
    click.echo(f"job/{job_id} deleted")


@cli.command()
@click.argument("ref", metavar="ID")
@click.option("--timeout", type=float, metavar="S", help="Give up after S seconds (exit 1).")
@pass_settings
def wait(settings: Settings, ref: str, timeout: float | None) -> None:
    """Block until a job ends (exit 0 if Succeeded).

    Exits 1 for any other final phase, or when --timeout passes first; the final
    phase goes to stderr.
    """
    with settings.client() as client:
        job = _wait_terminal(client, _resolve(client, ref), timeout)
    _finish(job)


@cli.command()
@click.argument("ref", metavar="ID")
@pass_settings
def resume(settings: Settings, ref: str) -> None:
    """Resubmit a preempted job from its checkpoint.

    The new job has the old one's spec, with RESUME_FROM pointing at its checkpoint
    directory; prints the new job's id.
    """
    with settings.client() as client:
        job = client.resume_job(_resolve(client, ref))
    click.echo(job["metadata"]["id"])


@cli.command()
@pass_settings
def workers(settings: Settings) -> None:
    """List workers, their capacity, lease and jobs."""
    with settings.client() as client:
        found = client.list_workers()
        bound = client.list_jobs(phase=_BOUND).items
    used: dict[str, int] = {}
    for job in bound:
        worker = job["status"].get("worker")
        gpus = (job["spec"].get("resources") or {}).get("gpus", 0)
        used[worker] = used.get(worker, 0) + max(1, gpus)  # a job takes a slot per GPU, min 1
    if not found:
        click.echo("No workers registered.", err=True)
        return
    render.emit(render.make_console(), render.workers_table(found, used))


for _verb in drain.VERBS:  # job cordon, uncordon, drain
    cli.add_command(_verb)
