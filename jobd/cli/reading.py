"""The verbs that show things: `job get`, `describe`, `status` and `workers`.

`job get` is kubectl's: jobs by default, or another kind named first (`job get projects`,
`job get workers w1`) or before a slash (`job get project/long-training`). A word that
names a kind is read as that kind, so a job called `projects` is `job/projects`.
"""

from __future__ import annotations

from collections.abc import Sequence

import click

from jobd.api.frozen import Frozen
from jobd.api.selectors import parse_selector
from jobd.api.vocabulary import BOUND_PHASES, Phase, array_id_of, normalise_worker_name
from jobd.cli import render
from jobd.cli.broker_client import ApiError, Document, JobdClient
from jobd.cli.failure import Failure, warn
from jobd.cli.gangs import members_table
from jobd.cli.options import client, output_option, phase_option, print_documents
from jobd.cli.targets import (
    Selection,
    array_or_none,
    find_array,
    job_targets,
    resolve,
    strip_kind,
)

__all__ = ["VERBS"]

_LIVE = [p.value for p in Phase if not p.terminal]
_BOUND = [p.value for p in BOUND_PHASES]
# The words `job get` reads as a kind, and the kind each means.
_KIND_WORDS = {
    "jobs": "job",
    "arrays": "array",
    "array": "array",
    "projects": "project",
    "project": "project",
    "workers": "worker",
    "worker": "worker",
}


class _Request(Frozen):
    kind: str  # job, project or worker
    names: tuple[str, ...]

    def __init__(self, kind: str, names: tuple[str, ...]) -> None:
        self._set(kind=kind, names=names)


def _parse_get(args: Sequence[str]) -> _Request:
    """What `job get ARGS...` asks for: a kind and names, kubectl's ways."""
    if args and args[0] in _KIND_WORDS:
        return _Request(_KIND_WORDS[args[0]], tuple(args[1:]))
    kinds, names = set(), []
    for arg in args:
        kind, slash, rest = arg.partition("/")
        if array_id_of(arg) is not None:  # A12
            kinds.add("array")
            names.append(arg)
        elif slash and kind in ("job", *_KIND_WORDS):
            kinds.add(_KIND_WORDS.get(kind, "job"))
            names.append(arg if kind in ("job", "jobs") else rest)
        else:
            kinds.add("job")
            names.append(arg)
    if len(kinds) > 1:
        raise click.UsageError("get one kind at a time: jobs, arrays, projects or workers")
    return _Request(kinds.pop() if kinds else "job", tuple(names))


@click.command()
@click.argument("args", nargs=-1, metavar="[KIND] [ID|NAME]...")
@output_option("table", "wide")
@click.option("-p", "--project", help="Only the jobs of this project.")
@phase_option("Only the jobs in this phase (any case); repeatable.")
@click.option("-l", "--selector", metavar="KEY=VALUE[,...]", help="Only what has these labels.")
@click.option("-w", "--watch", is_flag=True, help="Then print a line per change, until Ctrl-C.")
def get(
    args: tuple[str, ...],
    output: str,
    project: str | None,
    phase: tuple[str, ...],
    selector: str | None,
    watch: bool,
) -> None:
    """List jobs (or projects, workers), or show some.

    \b
    Examples:
      job get                          every job
      job get 7 long-training/resnet   two jobs
      job get -l team=vision --phase running
      job get A12                      a job array: its members counted by phase
      job get projects                 (also: project/NAME, workers, worker/NAME, arrays)
    """
    request = _parse_get(args)
    if selector is not None:
        try:
            parse_selector(selector)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="-l") from None
    if request.kind != "job" and (watch or phase or (project and request.kind != "array")):
        raise click.UsageError(f"-w, --phase and -p are for jobs, not {request.kind}s")
    with client() as broker:
        if _names_an_array(broker, request):
            request = _Request("array", request.names)
        if request.kind == "array":
            _show_arrays(broker, request.names, project, output)
        elif request.kind == "project":
            _show_projects(broker, request.names, selector, output)
        elif request.kind == "worker":
            _show_workers(broker, request.names, selector, output)
        else:
            _get_jobs(broker, request.names, output, project, phase, selector, watch)


def _names_an_array(broker: JobdClient, request: _Request) -> bool:
    """`job get NAME` of a NAME no job has, but an array has: that array is meant."""
    if request.kind != "job" or len(request.names) != 1:
        return False
    name = request.names[0]
    if name.isdigit() or strip_kind(name, "job") != name:
        return False
    project, _, short = name.rpartition("/")
    if broker.find_job(project or None, short) is not None:
        return False
    return array_or_none(broker, name) is not None


def _get_jobs(
    broker: JobdClient,
    names: Sequence[str],
    output: str,
    project: str | None,
    phase: tuple[str, ...],
    selector: str | None,
    watch: bool,
) -> None:
    if names:
        jobs = [broker.get_job(resolve(broker, name)) for name in names]
    else:
        jobs = broker.list_jobs(project=project, phase=phase, selector=selector).items
        if not jobs and project is not None:
            _check_project(broker, project)
    _show_jobs(jobs, output, single=len(names) == 1)
    if not watch:
        return
    only = jobs[0]["metadata"] if len(names) == 1 else {}
    changes = broker.job_changes(
        project=only.get("project", project),
        name=only.get("name"),
        phases=phase,
        selector=selector,
        known=jobs,
    )
    for op, job in changes:
        _show_change(op, job, output)


def _check_project(broker: JobdClient, project: str) -> None:
    """An empty list of a project that does not exist is a mistake, not an answer."""
    try:
        broker.get_project(project)
    except ApiError as exc:
        if exc.status != 404:
            raise
        jobs = broker.list_jobs(project=project, limit=1).items  # jobs of an undeclared one
        if not jobs:
            raise Failure(
                f"project {project!r} does not exist (`job get projects` lists them)"
            ) from None


def _show_jobs(jobs: list[Document], output: str, *, single: bool) -> None:
    if output in ("json", "yaml"):
        print_documents(jobs, output, single=single)
    elif jobs:
        render.print_table(render.jobs_table(jobs, wide=output == "wide"))
        members = members_table(jobs[0].get("status") or {}) if single else None
        if output == "wide" and members is not None:  # a multi-host job's, by rank
            click.echo()
            render.print_table(members)
    else:
        warn("No jobs found.")


def _show_change(op: str, job: Document, output: str) -> None:
    if output == "json":
        click.echo(render.to_json(job, compact=True))  # one document a line
    elif output == "yaml":
        from jobd.api.manifests import dump_yaml

        click.echo("---\n" + dump_yaml([job]), nl=False)
    else:
        click.echo(render.watch_line(op, job))


def _labelled(docs: list[Document], selector: str | None, part: str = "metadata") -> list[Document]:
    if selector is None:
        return docs
    wanted = parse_selector(selector)
    return [d for d in docs if wanted.matches((d.get(part) or {}).get("labels"))]


def _show_projects(
    broker: JobdClient, names: Sequence[str], selector: str | None, output: str
) -> None:
    if names:
        found = [broker.get_project(strip_kind(n, "project")) for n in names]
    else:
        found = _labelled(broker.list_projects(), selector)
    if output in ("json", "yaml"):
        print_documents(found, output, single=len(names) == 1)
    elif found:
        render.print_table(render.projects_table(found, wide=output == "wide"))
    else:
        warn("No projects found.")


def _show_arrays(
    broker: JobdClient, names: Sequence[str], project: str | None, output: str
) -> None:
    """Each array on a line, its members counted by phase; -o json: its document."""
    if names:
        found = [_array(broker, name) for name in names]
    else:
        found = broker.list_arrays(project=project)
    if output in ("json", "yaml"):
        print_documents(found, output, single=len(names) == 1)
    elif found:
        click.echo("".join(render.array_line(a) + "\n" for a in found), nl=False)
    else:
        warn("No arrays found.")


def _array(broker: JobdClient, name: str) -> Document:
    array = find_array(broker, name)
    if array is None:
        raise Failure(f"no array named {strip_kind(name, 'array')!r}")
    return array


def _show_workers(
    broker: JobdClient, names: Sequence[str], selector: str | None, output: str
) -> None:
    if names:
        found = [broker.get_worker(_worker_name(n)) for n in names]
    else:
        # A worker's labels are its spec's (--label, detected): what node_selector matches.
        found = _labelled(broker.list_workers(), selector, "spec")
    if output in ("json", "yaml"):
        print_documents(found, output, single=len(names) == 1)
        return
    if not found:
        warn("No workers registered.")
        return
    bound = broker.list_jobs(phase=_BOUND).items
    table = render.workers_table(found, bound, wide=output == "wide")
    render.print_table(table)


def _worker_name(raw: str) -> str:
    try:
        return normalise_worker_name(strip_kind(raw, "worker"))
    except ValueError as exc:
        raise Failure(str(exc)) from None


@click.command()
@output_option("table", "wide")
@click.option("-l", "--selector", metavar="KEY=VALUE[,...]", help="Only workers with these labels.")
def workers(output: str, selector: str | None) -> None:
    """List workers, their capacity, lease and jobs (as `job get workers`)."""
    with client() as broker:
        _show_workers(broker, (), selector, output)


@click.command()
@job_targets
@output_option("text")
def describe(targets: Selection, output: str) -> None:
    """Show jobs' spec, status, conditions and events.

    -o json prints {"job": ..., "events": [...]} for each job.
    """
    described: list[dict[str, object]] = []
    with client() as broker:

        def show(job_id: int) -> None:
            job = broker.get_job(job_id)
            events = list(broker.iter_events(job=job_id))
            if output == "text":
                if described:
                    click.echo()
                for block in render.describe_job(job, events):
                    render.emit(render.make_console(), block)
            described.append({"job": job, "events": events})

        targets.each(broker, show)
    if output != "text":
        print_documents(described, output, single=targets.single)
    targets.exit_if_failed()


@click.command()
@output_option("text", "wide")
def status(output: str) -> None:
    """Show the jobs still converging, and since when.

    A job converges while its desired phase differs from its observed one, e.g.
    `7 Pending→Running 2m10s waiting for capacity`.
    """
    with client() as broker:
        jobs = broker.list_jobs(phase=_LIVE).items
    converging = [j for j in jobs if j["status"].get("desired_phase") != j["status"].get("phase")]
    if output in ("json", "yaml"):
        print_documents(converging, output)
    elif not converging:
        warn("Every job is in its desired phase.")
    elif output == "wide":
        render.print_table(render.status_table(converging))
    else:
        for job in converging:
            click.echo(render.status_line(job))


VERBS = [get, describe, status, workers]
