"""The verbs that act on jobs: cancel, preempt, resume, rerun, delete, wait, preempt-blockers.

Each takes several jobs, a label selector and `-f FILE` (targets.py), acts on each, and
goes on past one it cannot act on (saying why; exit 1 at the end), as kubectl does.
"""

from __future__ import annotations

from collections.abc import Callable

import click

from jobd.cli import render
from jobd.cli.broker_client import ApiError, Document, JobdClient
from jobd.cli.durations import Duration
from jobd.cli.failure import Failure
from jobd.cli.options import client, output_option, print_documents
from jobd.cli.targets import (
    Selection,
    find_array,
    is_array_ref,
    job_targets,
    resolve,
    strip_kind,
)
from jobd.cli.waiting import EXIT_TIMEOUT, exit_with, wait_all

__all__ = ["VERBS"]


def _act(
    targets: Selection,
    output: str,
    verb: Callable[[JobdClient, int], Document],
    said: Callable[[Document], str],
) -> None:
    """`verb` on each job; a line each, or their documents with -o json/yaml."""
    done: list[Document] = []
    with client() as broker:

        def act(job_id: int) -> None:
            job = verb(broker, job_id)
            done.append(job)
            if output == "text":
                click.echo(said(job))

        targets.each(broker, act)
    if output != "text":
        print_documents(done, output, single=targets.single)
    targets.exit_if_failed()


@click.command()
@job_targets
@output_option("text")
def preempt(targets: Selection, output: str) -> None:
    """Request preemption of running jobs.

    The worker sends SIGTERM, waits the job's checkpoint grace, then SIGKILLs it.
    """
    _act(
        targets,
        output,
        JobdClient.preempt_job,
        lambda job: f"job/{job['metadata']['id']} preemption requested ({render.phase_text(job)})",
    )


@click.command()
@job_targets
@output_option("text")
def cancel(targets: Selection, output: str) -> None:
    """Stop jobs, queued or running; each ends Cancelled.

    A job array (A<id>) has every member cancelled that has not ended.
    """
    if _arrays_done(targets, output, _cancel_array):
        return
    _act(
        targets,
        output,
        JobdClient.cancel_job,
        lambda job: f"job/{job['metadata']['id']} cancel requested ({render.phase_text(job)})",
    )


def _cancel_array(broker: JobdClient, array_id: int) -> tuple[Document, str]:
    done = broker.cancel_array(array_id)
    return done, f"array/A{array_id} cancel requested ({_jobs(len(done['cancelled']))})"


@click.command()
@job_targets
@click.option(
    "--from-scratch",
    is_flag=True,
    help="For a job that never completed a checkpoint: run its spec again without RESUME_FROM.",
)
@click.option(
    "--force",
    is_flag=True,
    help="For a job that never completed a checkpoint: point RESUME_FROM at its checkpoint "
    "directory anyway.",
)
@output_option("text")
def resume(targets: Selection, from_scratch: bool, force: bool, output: str) -> None:
    """Resubmit preempted jobs from their checkpoints.

    Each new job has the old one's spec, with RESUME_FROM pointing at its checkpoint
    (`latest.<ext>`, else its checkpoint directory); prints each new job's id. A job whose
    checkpoint never completed is refused: say --from-scratch or --force.
    """
    if from_scratch and force:
        raise click.UsageError("--from-scratch and --force exclude each other: choose one")

    def resume_one(broker: JobdClient, job_id: int) -> Document:
        return broker.resume_job(job_id, from_scratch=from_scratch, force=force)

    _act(targets, output, resume_one, lambda job: str(job["metadata"]["id"]))


def _delete(broker: JobdClient, job_id: int) -> Document:
    job = broker.get_job(job_id)
    broker.delete_job(job_id)
    return job


@click.command()
@job_targets
@output_option("text")
def delete(targets: Selection, output: str) -> None:
    """Remove jobs that have ended (cancel a live one first), and their output.

    A job array (A<id>) goes whole, with its members, once all of them have ended.
    -o json prints the documents of the jobs deleted, as they were.
    """
    if _arrays_done(targets, output, _delete_array):
        return
    _act(targets, output, _delete, lambda job: f"job/{job['metadata']['id']} deleted")


def _delete_array(broker: JobdClient, array_id: int) -> tuple[Document, str]:
    array = broker.get_array(array_id)
    deleted = broker.delete_array(array_id)
    return array, f"array/A{array_id} deleted ({_jobs(len(deleted['jobs']))})"


def _jobs(n: int) -> str:
    return f"{n} job{'s' if n != 1 else ''}"


def _arrays_done(
    targets: Selection,
    output: str,
    verb: Callable[[JobdClient, int], tuple[Document, str]],
) -> bool:
    """`verb` on each job array named (A<id>, array/NAME), which then leave `targets`;
    True when nothing else is left to act on (and the verb is over)."""
    refs = [ref for ref in targets.refs if is_array_ref(ref)]
    if not refs:
        return False
    targets.refs = tuple(ref for ref in targets.refs if ref not in refs)
    done: list[Document] = []
    with client() as broker:
        for ref in refs:
            try:
                array = find_array(broker, ref)
                if array is None:
                    raise Failure(f"no array named {strip_kind(ref, 'array')!r}")
                document, line = verb(broker, int(array["metadata"]["id"]))
            except (ApiError, Failure) as exc:
                targets.fail(exc.message)
                continue
            done.append(document)
            if output == "text":
                click.echo(line)
    if targets.refs or targets.selector or targets.files:
        return False
    if output != "text":
        print_documents(done, output, single=len(refs) == 1)
    targets.exit_if_failed()
    return True


@click.command()
@job_targets
@click.option(
    "--timeout",
    type=Duration(),
    metavar="DURATION",
    help=f"Give up after this long (90, 10m, 2h): exit {EXIT_TIMEOUT}.",
)
@output_option("text")
def wait(targets: Selection, timeout: float | None, output: str) -> None:
    """Block until jobs end (each member of an array A<id>); exit with what ended them.

    \b
    Exit codes (with several jobs: the first, in the order given, that is not 0):
      0        the job Succeeded
      1-255    it Failed with this exit code of its own
      128+N    signal N ended it (143: SIGTERM, 137: SIGKILL)
      124      --timeout passed first
      200      it Failed without an exit code (could not start, worker lost, ...)
      201      it was Cancelled
      202      it was Preempted
      203      it was deleted while waited for
      1        (with `error:` on stderr) a job was not found, or the broker refused
    The final phase of each job goes to stderr; -o json prints the jobs' documents.
    """
    with client() as broker:
        endings = wait_all(broker, list(targets.ids(broker)), timeout, show=output == "text")
    if output != "text":
        print_documents([e.job for e in endings if e.job], output, single=targets.single)
    if targets.failed and not any(e.code for e in endings):
        targets.exit_if_failed()
    exit_with(endings)


@click.command()
@click.argument("ref", metavar="ID")
@click.option("--name", help="The new job's name [default: the broker picks one].")
@click.option(
    "--env",
    multiple=True,
    metavar="K=V",
    help="Set or replace a variable (how to give back a masked secret); repeatable.",
)
@output_option("text")
def rerun(ref: str, name: str | None, env: tuple[str, ...], output: str) -> None:
    """Submit a copy of a job that has ended, as a new job; print its id.

    The copy has the job's spec, project and labels (and `jobd/reruns: <id>`), not its
    dependencies (they ran). An env value shown masked (***), as secrets are, is not
    sent: give it again with --env KEY=VALUE, or the rerun is refused.
    """
    from jobd.cli.submit import SubmitError, build_rerun_job  # pydantic, for this verb only

    with client() as broker:
        job = broker.get_job(resolve(broker, ref))
        try:
            document = build_rerun_job(job, name=name, env=env)
        except SubmitError as exc:
            raise Failure(str(exc)) from None
        created = broker.create_job(document)
    if output == "text":
        click.echo(created["metadata"]["id"])
    else:
        print_documents([created], output, single=True)


@click.command("preempt-blockers")
@click.argument("ref", metavar="QUEUED_ID")
@click.option("--dry-run", is_flag=True, help="Only show which jobs would be preempted.")
@output_option("text")
def preempt_blockers(ref: str, dry_run: bool, output: str) -> None:
    """Preempt what keeps a queued job from running.

    Finds the running, preemptible, lower-priority job(s) whose slots would let the
    queued job start on one worker, and preempts them (or, with --dry-run, only says so).
    """
    with client() as broker:
        result = broker.preempt_blockers(resolve(broker, ref), dry_run=dry_run)
    if output != "text":
        body: dict[str, object] = {
            "candidate": result.candidate,
            "worker": result.worker,
            "dry_run": result.dry_run,
            "victims": result.victims,
        }
        if result.workers:  # a gang's, as the broker answers them
            body["workers"] = result.workers
        print_documents([body], output, single=True)
        return
    for victim in result.victims:
        click.echo(render.victim_line(victim))
    verb = "would preempt" if result.dry_run else "preempted"
    workers = ", ".join(result.workers) or result.worker
    target = f" on {workers}" if workers else ""
    n = len(result.victims)
    click.echo(f"{verb} {n} job{'s' if n != 1 else ''} so job/{result.candidate} can run{target}")


VERBS = [cancel, delete, preempt, preempt_blockers, rerun, resume, wait]
