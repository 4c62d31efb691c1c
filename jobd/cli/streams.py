"""The verbs that follow: `job logs` (a job's output) and `job events` (the record).

`job logs --tail N --since 10m` starts where the broker finds the last N lines, or the
output that reached it in the last ten minutes (docs/cli.md); `-f` then follows from
there, with the job's progress under the output when stderr is a terminal
(progress_footer.py). `job events` is a table for people and documents for scripts; `-f` prints what
happens from now on, unless `--all` asks for the history first.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from jobd.cli import render
from jobd.cli.broker_client import Document, JobdClient
from jobd.cli.durations import Duration
from jobd.cli.options import client, output_option, print_documents
from jobd.cli.targets import resolve

__all__ = ["VERBS"]


@click.command()
@click.argument("ref", metavar="ID")
@click.option("-f", "--follow", is_flag=True, help="Keep printing output until the job ends.")
@click.option("--tail", type=click.IntRange(min=0), metavar="N", help="Start at the last N lines.")
@click.option(
    "--since",
    type=Duration(),
    metavar="DURATION",
    help="Start at the output of the last DURATION (10m, 2h, 90s), as it reached the broker.",
)
@click.option(
    "--rank",
    type=click.IntRange(min=0),
    metavar="N",
    help="Only member N of a multi-host job, unprefixed (default: every member's lines, "
    "each behind [rank N], in the order they arrived).",
)
def logs(ref: str, follow: bool, tail: int | None, since: float | None, rank: int | None) -> None:
    """Print a job's output (stdout and stderr, as captured).

    Of a multi-host job (--nodes N), every member's lines, each behind `[rank N] `, in
    the order they reached the broker; --rank N prints one member's alone. With -f on a
    terminal, the job's progress (jobd.client.report_progress) is shown on stderr below
    the output.
    """
    from jobd.cli.progress_footer import footer_for

    out = sys.stdout.buffer
    with client() as broker:
        job_id = resolve(broker, ref)
        footer = footer_for(broker, job_id, follow)
        chunk = broker.read_logs(job_id, follow=follow, tail=tail, since_s=since, rank=rank)
        at_line_start = True
        try:
            while True:
                if footer is not None and chunk.data:
                    footer.clear()
                out.write(chunk.data)
                out.flush()
                if chunk.done or (not follow and not chunk.data):
                    return
                at_line_start = chunk.data.endswith(b"\n") if chunk.data else at_line_start
                if footer is not None:
                    footer.draw(at_line_start)
                chunk = broker.read_logs(job_id, offset=chunk.offset, follow=follow, rank=rank)
        finally:
            if footer is not None:
                footer.clear()


@click.command()
@click.option("--job", "ref", metavar="ID", help="Only the events of this job.")
@click.option("--type", "event_type", metavar="T", help="Only events of this type.")
@click.option("-f", "--follow", is_flag=True, help="Print events as they happen, until Ctrl-C.")
@click.option("--all", "history", is_flag=True, help="With -f: print the history first.")
@click.option(
    "--file",
    "events_file",
    type=click.Path(path_type=Path, dir_okay=False),
    metavar="PATH",
    help="Read PATH (an events.jsonl) and its rotated files PATH.N ... PATH.1, oldest "
    "first, instead of asking the broker.",
)
@output_option("table", "wide")
def events(
    ref: str | None,
    event_type: str | None,
    follow: bool,
    history: bool,
    events_file: Path | None,
    output: str,
) -> None:
    """Print events, from the same records as events.jsonl.

    A table (TIME EVENT JOB REASON; -o wide adds every other field) or, with -o json, a
    list of the events as events.jsonl holds them. With -f: one line (or one JSON object)
    per event from now on.
    """
    if events_file is not None:
        _show_events(_from_file(events_file, ref, event_type, follow), output)
        return
    with client() as broker:
        job = resolve(broker, ref) if ref else None
        if not follow:
            found = list(broker.iter_events(job=job, event_type=event_type))
            _show_events(found, output)
            return
        if output in ("table", "wide"):
            click.echo(render.event_header_text(wide=output == "wide"))
        _follow(broker, job, event_type, output, history)


def _from_file(path: Path, ref: str | None, event_type: str | None, follow: bool) -> list[Document]:
    """The events of events.jsonl at `path` and its rotated files, as `--job`/`--type` say."""
    from jobd.eventfiles import files_oldest_first, read_events

    if follow:
        raise click.UsageError("--file reads what the files hold; -f follows the broker")
    if ref is not None and not ref.isdigit():
        raise click.UsageError(f"--job {ref}: with --file, a job is named by its id")
    if not files_oldest_first(path):
        raise click.UsageError(f"--file {path}: no such file, nor any rotated one")
    job = int(ref) if ref is not None else None
    return [
        event
        for event in read_events(path)
        if (job is None or event.get("job") == job)
        and (event_type is None or event.get("event") == event_type)
    ]


def _show_events(found: list[Document], output: str) -> None:
    if output in ("json", "yaml"):
        print_documents([_as_recorded(e) for e in found], output)
    elif found:
        render.print_table(render.events_table(found, wide=output == "wide"))
    else:
        click.echo("No events found.", err=True)


def _follow(
    broker: JobdClient, job: int | None, event_type: str | None, output: str, history: bool
) -> None:
    after: int | None = None
    from_now = not history
    while True:
        page = broker.events(
            job=job, event_type=event_type, after=after, from_now=from_now, follow=True
        )
        from_now = False
        for event in page.items:
            click.echo(_line(event, output))
        after = page.last if page.last is not None else after


def _line(event: Document, output: str) -> str:
    if output == "json":
        return render.event_line(event)  # one object a line, as in events.jsonl
    if output == "yaml":
        from jobd.api.manifests import dump_yaml

        return "---\n" + dump_yaml([_as_recorded(event)]).rstrip("\n")
    return render.event_row_text(event, wide=output == "wide")


def _as_recorded(event: Document) -> Document:
    """The event as its events.jsonl line holds it: the broker's `seq` is not part of it."""
    return {k: v for k, v in event.items() if k != "seq"}


VERBS = [logs, events]
