"""`jobd.Executor`: Python functions run as jobs, in submitit's manner.

`submit(fn, *args, **kwargs)` pickles the call with cloudpickle (extra `jobd[executor]`)
and submits a job running `python -m jobd.sdk.runner` under the submitting interpreter;
`map_array(fn, items)` makes one job array whose member i runs `fn(items[i])`. The call
travels through a shared directory when one is configured (`folder=`, else
`JOBD_EXECUTOR_DIR`: a directory the submitter and the workers both see at the same
path), else inside the job's document (size-capped by the broker: 413 past its cap of a
job). The outcome comes back the same way (runner.py). A `JobFuture` waits for the job,
follows it through `auto_resume` (a preempted job that checkpointed is continued by a new
job, `status.resumed_by`), and returns the value or raises the function's exception with
the remote traceback as its cause.
"""

from __future__ import annotations

import base64
import os
import re
import secrets
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Generic, TypeVar

from jobd.api.models import Job, Phase
from jobd.sdk import runner
from jobd.sdk.client import Client
from jobd.wire.errors import ApiError

__all__ = ["FOLDER_ENV", "Executor", "JobFailed", "JobFuture", "RemoteTraceback"]

T = TypeVar("T")
# One environment variable the kernel takes is under 128 KiB (MAX_ARG_STRLEN).
PIECE_CHARS = 96 * 1024
# How long a preempted job that checkpointed may take to be resumed before the future
# gives up on it (the broker's lifecycle loop does it within moments).
RESUME_WAIT_S = 60.0
# Through the broker, each member of an array stores the whole payload in its own spec:
# past this many bytes in all, a shared folder is asked for instead.
ARRAY_STORE_CAP = 64 * 1024 * 1024
# Output lines read first for the outcome (a larger one makes the future read it all).
TAIL_LINES = 256
FOLDER_ENV = "JOBD_EXECUTOR_DIR"  # the shared folder, when no folder= is given


class RemoteTraceback(Exception):
    """The traceback of an exception raised in the job, as the cause of the one re-raised."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text

    def __str__(self) -> str:
        return f'\n"""\n{self.text.rstrip()}\n"""'


class JobFailed(Exception):
    """The job ended without the function's outcome (cancelled, killed, preempted and not
    resumed, lost); `job` is its final document."""

    def __init__(self, job: Job, message: str) -> None:
        super().__init__(message)
        self.job = job


class JobFuture(Generic[T]):
    """The outcome of one call run as a job: `result()`, `exception()`, `done()`, `cancel()`.

    `job_id` is the job running it now (it changes when the job is resumed)."""

    def __init__(self, client: Client, job_id: int, folder: Path | None, index: int | None) -> None:
        self.job_id = job_id
        self._client, self._folder, self._index = client, folder, index
        self._outcome: tuple[Any, ...] | None = None

    def result(self, timeout: float | None = None) -> T:
        """The function's value; its exception (the remote traceback as its cause), or
        JobFailed, or TimeoutError after `timeout` seconds."""
        outcome = self._settle(timeout)
        if outcome[0] == "value":
            value: T = outcome[1]
            return value
        raise outcome[1]

    def exception(self, timeout: float | None = None) -> BaseException | None:
        outcome = self._settle(timeout)
        return outcome[1] if outcome[0] == "raise" else None

    def done(self) -> bool:
        if self._outcome is not None:
            return True
        job = self._client.get(self.job_id)
        return job.status.phase in _ENDS and not job.auto_resumes

    def cancel(self) -> bool:
        """Cancel the job; False when it had already ended."""
        if self.done():
            return False
        self._client.cancel(self.job_id)
        return True

    def job(self) -> Job:
        """The job's document as it is now."""
        return self._client.get(self.job_id)

    def _settle(self, timeout: float | None) -> tuple[Any, ...]:
        if self._outcome is None:
            deadline = None if timeout is None else time.monotonic() + timeout
            job = self._final_job(deadline)
            self._outcome = self._read_outcome(job)
        return self._outcome

    def _final_job(self, deadline: float | None) -> Job:
        """The last job of the chain of resumes, once it has ended."""
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            job = self._client.wait(self.job_id, timeout=left)
            try:
                wait_s = RESUME_WAIT_S if left is None else min(left, RESUME_WAIT_S)
                following = self._next_run(job, wait_s)
            except TimeoutError:
                if left is not None and left < RESUME_WAIT_S:
                    raise  # the caller's timeout, not the broker's slowness
                raise JobFailed(
                    job, f"job {job.metadata.id} was preempted and not resumed in time"
                ) from None
            if following is None:
                return job
            self.job_id = following

    def _next_run(self, job: Job, wait_s: float) -> int | None:
        """The job resuming `job`, when auto_resume makes (or has made) one: the broker's
        lifecycle loop sets `resumed_by` moments after the preemption, watched for here
        (TimeoutError when it has not within `wait_s`)."""
        if not job.auto_resumes or job.status.resumed_by is not None:
            return job.status.resumed_by
        watching = self._client.watch(job.metadata.project, name=job.metadata.name, timeout=wait_s)
        for _op, seen in watching:
            if seen.metadata.id == job.metadata.id and seen.status.resumed_by is not None:
                return seen.status.resumed_by
        raise TimeoutError(f"job {job.metadata.id} was not resumed within {wait_s:g} s")

    def _read_outcome(self, job: Job) -> tuple[Any, ...]:
        data = self._from_folder() if self._folder is not None else self._from_output()
        if data is None:
            reason = job.status.reason
            raise JobFailed(
                job,
                f"job {job.metadata.id} ended {job.status.phase.value}"
                + (f" ({reason})" if reason else "")
                + f" without the function's outcome: see `job logs {job.metadata.id}`",
            )
        import cloudpickle

        outcome: tuple[Any, ...] = cloudpickle.loads(data)
        if outcome[0] == "raise":
            outcome[1].__cause__ = RemoteTraceback(outcome[2])
        return outcome

    def _from_folder(self) -> bytes | None:
        assert self._folder is not None
        try:
            return (self._folder / runner.result_name(self._index)).read_bytes()
        except FileNotFoundError:
            return None

    def _from_output(self) -> bytes | None:
        """The outcome from the end of the job's output: its last lines, else all of it
        (stderr is merged with stdout, so lines of the one may come between the other's)."""
        for text in (
            self._client.log_tail(self.job_id, TAIL_LINES),
            self._client.logs(self.job_id),
        ):
            data = _outcome_in(text)
            if data is not None:
                return data
        return None


def _outcome_in(output: str) -> bytes | None:
    """The pickled outcome the runner printed (`runner.RESULT_MARKER` lines ended by
    `runner.END_MARKER <count>`), or None when `output` does not hold all of it."""
    lines = output.splitlines()
    ends = [n for n, line in enumerate(lines) if line.startswith(runner.END_MARKER + " ")]
    if not ends or not (count := lines[ends[-1]].split()[-1]).isdigit():
        return None
    marker = runner.RESULT_MARKER + " "
    pieces = [line[len(marker) :] for line in lines[: ends[-1]] if line.startswith(marker)]
    pieces = pieces[len(pieces) - int(count) :]
    return base64.b64decode("".join(pieces)) if len(pieces) == int(count) else None


_ENDS = frozenset({Phase.SUCCEEDED, Phase.FAILED, Phase.PREEMPTED, Phase.CANCELLED})


class Executor:
    """Runs Python functions as jobs of `project` in `cwd` (default: here), each with
    `spec_fields` (`gpus=1`, `preemptible=True`, `auto_resume=True`, ...).

    `folder` (else `JOBD_EXECUTOR_DIR`) is a shared directory for calls and outcomes;
    without one they travel through the broker. `python` is the interpreter the job runs
    (default: this one, `sys.executable`); `client` a `jobd.Client` to use (default: one
    found as `job` finds the broker)."""

    def __init__(
        self,
        project: str | None = None,
        cwd: str | None = None,
        *,
        folder: str | os.PathLike[str] | None = None,
        python: str | None = None,
        client: Client | None = None,
        **spec_fields: Any,
    ) -> None:
        try:
            import cloudpickle  # noqa: F401  (refused here, not at the first submit)
        except ModuleNotFoundError:
            raise ModuleNotFoundError(
                "jobd.Executor ships functions with cloudpickle: pip install 'jobd[executor]'",
                name="cloudpickle",
            ) from None
        self.project, self.cwd = project, os.path.abspath(cwd or ".")
        chosen = folder or os.environ.get(FOLDER_ENV) or None
        self.folder = Path(chosen).expanduser().resolve() if chosen else None
        self.python = python or sys.executable
        self.client = client or Client()
        self.spec_fields = spec_fields

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> JobFuture[T]:
        """Run `fn(*args, **kwargs)` as one job."""
        folder, fields = self._ship(fn, [(args, kwargs)])
        job = self._refused_as_413(
            lambda: self.client.submit(
                [self.python, "-m", "jobd.sdk.runner"],
                project=self.project,
                cwd=self.cwd,
                name=_job_name(fn),
                **fields,
            )
        )
        assert job.metadata.id is not None
        return JobFuture(self.client, job.metadata.id, folder, None)

    def map_array(
        self, fn: Callable[..., T], *iterables: Iterable[Any], parallelism: int | None = None
    ) -> list[JobFuture[T]]:
        """One job array whose member i runs `fn(a[i], b[i], ...)` for the iterables
        given (as `map`); one future per member, in order."""
        calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
            (tuple(args), {}) for args in zip(*iterables, strict=True)
        ]
        if not calls:
            return []
        folder, fields = self._ship(fn, calls)
        array = self._refused_as_413(
            lambda: self.client.submit_array(
                [self.python, "-m", "jobd.sdk.runner"],
                list(range(len(calls))),
                parallelism=parallelism,
                project=self.project,
                cwd=self.cwd,
                name=_job_name(fn),
                **fields,
            )
        )
        return [JobFuture(self.client, i, folder, n) for n, i in enumerate(array.status.jobs)]

    def _ship(
        self, fn: Callable[..., Any], calls: Sequence[tuple[tuple[Any, ...], dict[str, Any]]]
    ) -> tuple[Path | None, dict[str, Any]]:
        """Where the call goes: a new directory in the folder, or the job's environment;
        the spec's fields that say so."""
        import cloudpickle

        payload = cloudpickle.dumps({"fn": fn, "calls": list(calls)})
        fields = dict(self.spec_fields)
        env = dict(fields.pop("env", None) or {})
        if self.folder is not None:
            place = self.folder / f"{_job_name(fn)}-{secrets.token_hex(8)}"
            place.mkdir(parents=True, mode=0o700)
            (place / "payload.pkl").write_bytes(payload)
            env[runner.PAYLOAD_DIR_ENV] = str(place)
            return place, {**fields, "env": env}
        text = base64.b64encode(payload).decode()
        if len(calls) > 1 and len(text) * len(calls) > ARRAY_STORE_CAP:
            raise ValueError(
                f"{len(calls):,} members each carrying the {len(text):,} bytes of the calls "
                f"are over the {ARRAY_STORE_CAP:,} sent through the broker: give the "
                "Executor a shared folder (folder=, or JOBD_EXECUTOR_DIR)"
            )
        for n, start in enumerate(range(0, len(text), PIECE_CHARS)):
            env[f"{runner.PAYLOAD_ENV}{n}"] = text[start : start + PIECE_CHARS]
        return None, {**fields, "env": env}

    @staticmethod
    def _refused_as_413(submit: Callable[[], T]) -> T:
        try:
            return submit()
        except ApiError as exc:
            if exc.status != 413:
                raise
            raise ApiError(
                413,
                f"{exc.message}: the pickled call is too large to send through the broker; "
                "give the Executor a shared folder (folder=, or JOBD_EXECUTOR_DIR)",
            ) from None


def _job_name(fn: Callable[..., Any]) -> str:
    """A job name from the function's (`train_model` → `train-model-3f2a`)."""
    base = re.sub(r"[^a-z0-9]+", "-", getattr(fn, "__name__", "fn").lower()).strip("-")
    return f"{(base or 'fn')[:40]}-{secrets.token_hex(3)}"
