"""`job wait` and `job submit --wait`: block until jobs end, and exit as a script needs.

The exit code passes the job's own through, as `sbatch --wait` and `tsp -w` do, and
says with codes of its own what jobd decided (docs/cli.md, "job wait"):

| code | the job ... |
|---|---|
| 0 | Succeeded |
| 1-255 | Failed with this exit code |
| 128+N | was ended by signal N (143: SIGTERM, 137: SIGKILL) |
| 124 | had not ended when `--timeout` passed (as timeout(1)) |
| 200 | Failed with no exit code of its own (it could not start, its worker was lost, ...) |
| 201 | was Cancelled |
| 202 | was Preempted |
| 203 | was deleted before it ended |

A code a job exits with may be one of jobd's too (a job may `exit 201`): the phase,
printed on stderr, tells them apart. With several jobs, the code is the first job's (in
the order given) that did not succeed.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

from jobd.api.vocabulary import Phase
from jobd.cli import render
from jobd.cli.broker_client import Document, JobdClient
from jobd.cli.failure import warn

__all__ = [
    "EXIT_CANCELLED",
    "EXIT_DELETED",
    "EXIT_FAILED",
    "EXIT_PREEMPTED",
    "EXIT_TIMEOUT",
    "Ending",
    "exit_code_of",
    "exit_with",
    "wait_all",
    "wait_for",
]

EXIT_TIMEOUT = 124
EXIT_FAILED = 200
EXIT_CANCELLED = 201
EXIT_PREEMPTED = 202
EXIT_DELETED = 203

_TERMINAL = frozenset(p.value for p in Phase if p.terminal)


@dataclass(frozen=True)
class Ending:
    """How waiting for one job ended: its exit code and the line that says it."""

    job_id: int
    code: int
    text: str
    job: Document | None  # the last document seen; None when deleted


def exit_code_of(job: Document) -> int:
    """The exit code `job wait` gives for a job that has ended."""
    status = job.get("status") or {}
    phase = status.get("phase")
    if phase == Phase.SUCCEEDED:
        return 0
    if phase == Phase.CANCELLED:
        return EXIT_CANCELLED
    if phase == Phase.PREEMPTED:
        return EXIT_PREEMPTED
    sig, code = status.get("exit_signal"), status.get("exit_code")
    if isinstance(sig, int) and 1 <= sig <= 127:
        return 128 + sig
    if isinstance(code, int) and 1 <= code <= 255:
        return code
    return EXIT_FAILED


def _ended_text(job: Document) -> str:
    status = job.get("status") or {}
    sig, code = status.get("exit_signal"), status.get("exit_code")
    if isinstance(sig, int) and sig > 0:
        detail = f" (signal {sig}, {_signal_name(sig)})"
    elif code:
        detail = f" (exit code {code})"
    else:
        detail = ""
    return f"job/{job['metadata']['id']} {status.get('phase')}{detail}"


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def wait_for(client: JobdClient, job_id: int, deadline: float | None, show: bool = True) -> Ending:
    """Block until the job is terminal, deleted, or `deadline` (time.monotonic()) passes.

    Meanwhile, with `show` and stderr a terminal, a spinner there says the job's phase and
    progress (a bar once it reported a total)."""
    job = client.get_job(job_id)
    meta = job["metadata"]
    with _spinner(_waiting_text(job), show) as spinner:
        if job["status"].get("phase") in _TERMINAL:
            return Ending(job_id, exit_code_of(job), _ended_text(job), job)
        changes = client.job_changes(
            project=meta.get("project"), name=meta.get("name"), deadline=deadline
        )
        for op, current in changes:
            if current["metadata"].get("id") != job_id:
                continue  # an older job of the same name
            if op == "DELETED":
                return Ending(
                    job_id, EXIT_DELETED, f"job/{job_id} was deleted before it ended", None
                )
            job = current
            if spinner is not None:
                spinner.update(_waiting_text(job))
            if job["status"].get("phase") in _TERMINAL:
                return Ending(job_id, exit_code_of(job), _ended_text(job), job)
    text = f"job/{job_id} is still {render.phase_text(job)}: the wait timed out"
    return Ending(job_id, EXIT_TIMEOUT, text, job)


def wait_all(
    client: JobdClient, job_ids: Sequence[int], timeout: float | None, show: bool = True
) -> list[Ending]:
    """Wait for each job in turn, all within one `timeout`."""
    deadline = None if timeout is None else time.monotonic() + timeout
    return [wait_for(client, job_id, deadline, show) for job_id in job_ids]


def exit_with(endings: Sequence[Ending]) -> NoReturn:
    """Say how each job ended on stderr; exit with the first code that is not 0."""
    for ending in endings:
        warn(ending.text)
    sys.exit(next((e.code for e in endings if e.code), 0))


def _waiting_text(job: Document) -> str:
    text = f"job/{job['metadata']['id']} {render.phase_text(job)}"
    progress = render.progress_line(job)
    return f"{text}  {progress}" if progress else text


def _spinner(text: str, show: bool) -> contextlib.AbstractContextManager[Any]:
    if not show or not sys.stderr.isatty():
        return contextlib.nullcontext(None)
    return render.make_console(stderr=True).status(text)
