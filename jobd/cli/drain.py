"""`job cordon`, `job uncordon` and `job drain`: taking a worker out of service by hand.

`job drain` is client-side, as `kubectl drain` is: it asks the broker to cordon the
worker (and, with --preempt, to preempt its preemptible jobs), then asks again every
half second until no job is bound there, showing what it waits for. Asking again
preempts the jobs that started since (a Scheduled job starts on a cordoned worker; it
was bound before the cordon). Jobs that are not preemptible are waited for, never
killed: at --timeout the verb exits 1 naming them, and the worker stays cordoned.
"""

from __future__ import annotations

import contextlib
import sys
import time
from typing import IO, Any

import click

from jobd.api.vocabulary import normalise_worker_name
from jobd.cli import render
from jobd.cli.broker_client import Document, DrainResult, JobdClient
from jobd.cli.targets import strip_kind

__all__ = ["VERBS"]

_POLL_S = 0.5


class _Failure(click.ClickException):
    """One sentence on stderr, as every `job` verb's errors are."""

    def show(self, file: IO[Any] | None = None) -> None:
        click.echo(f"error: {self.message}", err=True)


def _client() -> JobdClient:
    client: JobdClient = click.get_current_context().find_root().obj.client()
    return client


def _worker_name(raw: str) -> str:
    """The name as the worker registered it: hostnames are lower-cased (CONTRACT §2).
    `worker/NAME`, as `job` prints a worker, is taken too."""
    try:
        return normalise_worker_name(strip_kind(raw, "worker"))
    except ValueError as exc:
        raise _Failure(str(exc)) from None


_OUTPUT = click.option(
    "-o", "--output", type=click.Choice(["text", "json"]), default="text", show_default=True
)


@click.command()
@click.argument("worker")
@_OUTPUT
def cordon(worker: str, output: str) -> None:
    """Place no new job on WORKER; the jobs running there go on."""
    with _client() as client:
        _show_worker(client.cordon_worker(_worker_name(worker)), "cordoned", output)


@click.command()
@click.argument("worker")
@_OUTPUT
def uncordon(worker: str, output: str) -> None:
    """Place jobs on WORKER again."""
    with _client() as client:
        _show_worker(client.uncordon_worker(_worker_name(worker)), "uncordoned", output)


def _show_worker(worker: Document, verb: str, output: str) -> None:
    if output == "json":
        click.echo(render.to_json(worker))
    else:
        click.echo(f"worker/{worker['metadata']['name']} {verb}")


@click.command()
@click.argument("worker")
@click.option(
    "--preempt",
    is_flag=True,
    help="Preempt the worker's preemptible jobs (SIGTERM, their grace, then SIGKILL); "
    "the others are waited for.",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0),
    metavar="S",
    help="Give up after S seconds: exit 1 naming the jobs still there (the worker "
    "stays cordoned). [default: wait as long as it takes]",
)
@_OUTPUT
def drain(worker: str, preempt: bool, timeout: float | None, output: str) -> None:
    """Cordon WORKER, then wait until no job is bound to it.

    With --preempt, its preemptible running jobs are preempted with their grace and end
    Preempted (resume them with `job resume`); jobs that are not preemptible, and
    without --preempt every job, are waited for until they end on their own.
    """
    name = _worker_name(worker)
    deadline = None if timeout is None else time.monotonic() + timeout
    preempted: list[int] = []
    with _client() as client, _progress() as progress:
        result = client.drain_worker(name, preempt=preempt)
        _say(f"worker/{name} cordoned", output)
        while True:
            for job_id in result.preempted:
                _say(f"job/{job_id} preempted", output)
            preempted += result.preempted
            if not result.remaining:
                break
            progress(_waiting_text(name, result.remaining, preempt))
            if deadline is not None and time.monotonic() >= deadline:
                _report(name, preempted, result, output)
                raise _Failure(_timeout_text(name, result.remaining, timeout or 0, preempt))
            time.sleep(_POLL_S)
            result = client.drain_worker(name, preempt=preempt)
    _report(name, preempted, result, output)
    _say(f"worker/{name} drained", output)


def _say(line: str, output: str) -> None:
    """A line of the story: stdout for text, stderr when stdout carries the JSON."""
    click.echo(line, err=output == "json")


def _report(name: str, preempted: list[int], result: DrainResult, output: str) -> None:
    if output == "json":
        document = {
            "worker": name,
            "drained": not result.remaining,
            "preempted": preempted,
            "remaining": result.remaining,
        }
        click.echo(render.to_json(document))


def _job_text(job: Document, preempt: bool) -> str:
    status = job.get("status") or {}
    phase = status.get("phase", "?")
    why = ""
    if preempt and phase == "Running" and not (status.get("effective") or {}).get("preemptible"):
        why = ", not preemptible"
    return f"job/{job['metadata']['id']} ({phase}{why})"


def _waiting_text(name: str, jobs: list[Document], preempt: bool) -> str:
    listed = ", ".join(_job_text(j, preempt) for j in jobs)
    return f"waiting for {len(jobs)} job{'s' if len(jobs) != 1 else ''} on {name}: {listed}"


def _timeout_text(name: str, jobs: list[Document], timeout: float, preempt: bool) -> str:
    listed = ", ".join(_job_text(j, preempt) for j in jobs)
    return (
        f"worker {name} is not drained after {timeout:g} s (it stays cordoned): "
        f"{listed} still there"
    )


@contextlib.contextmanager
def _progress() -> Any:
    """Shows the latest progress line: a spinner on a terminal, else each new line once."""
    if sys.stderr.isatty():
        with render.make_console(stderr=True).status("") as spinner:
            yield lambda text: spinner.update(text)
        return
    last: list[str] = [""]

    def show(text: str) -> None:
        if text != last[0]:
            click.echo(text, err=True)
            last[0] = text

    yield show


VERBS = (cordon, uncordon, drain)
"""The verbs this module adds to the `job` group (registered in job_main.py)."""
