"""`jobd.Client`: the broker's API from Python, synchronously (notebooks, scripts).

Each method is one verb of `job`, over the wire's `Client` and its calls; jobs come back
as `jobd.api.models.Job`. A refusal raises `ApiError` (`.status`, the broker's HTTP
status; `.message`, its reason), a broker out of reach `BrokerUnreachable`. The broker
is found as `job` finds it (`connection.py`). `watch` and `wait` follow jobs through the
wire's informer (list, then watch from the list's revision).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Literal, overload

from jobd.api.arrays import JobArray
from jobd.api.models import Job
from jobd.sdk import documents
from jobd.sdk.connection import find_broker
from jobd.sdk.documents import JobRef, Selector
from jobd.wire import calls
from jobd.wire import client as wire
from jobd.wire.answers import ApplyResult, Document
from jobd.wire.closing import Closing
from jobd.wire.informer import Informer, JobFilter

__all__ = ["Client"]

Jobs = list[Job]
ApplyResults = list[ApplyResult]
LOG_HOLD_S = 30.0


class Client(Closing):
    """A client of the broker (or of several, comma-separated, asked in turn: a standby's
    307 is followed, a broker down passed over); use it as a context manager, or close() it.

    `server`, `token`, `token_file` and `context` stand for `job`'s flags: each not given
    is read from the environment (JOBD_URL, JOBD_TOKEN, JOBD_TOKEN_FILE, JOBD_CONTEXT),
    then the context, then the defaults (the local broker and its admin token).
    """

    def __init__(
        self,
        server: str | None = None,
        *,
        token: str | None = None,
        token_file: str | None = None,
        context: str | None = None,
        timeout: float = 15.0,
    ) -> None:
        found = find_broker(server, token, token_file, context)
        self.server = found.server
        self.project = found.project  # the context's default project, if it names one
        self._wire = wire.open_brokers(
            found.server, found.token, timeout=timeout, user_agent="jobd-sdk"
        )

    # -- making jobs

    def submit(
        self,
        command: str | Sequence[str],
        *,
        project: str | None = None,
        cwd: str | None = None,
        name: str | None = None,
        labels: Mapping[str, str] | None = None,
        **spec_fields: Any,
    ) -> Job:
        """A new job running `command` in `cwd` (default: here), as `job submit`."""
        document = documents.job_document(
            command,
            project=project or self.project,
            cwd=cwd,
            name=name,
            labels=labels,
            spec_fields=spec_fields,
        )
        return documents.as_job(self._wire.run(calls.create_job(document)))

    def submit_array(
        self,
        command: str | Sequence[str],
        indices: Sequence[int],
        *,
        parallelism: int | None = None,
        project: str | None = None,
        cwd: str | None = None,
        name: str | None = None,
        labels: Mapping[str, str] | None = None,
        **spec_fields: Any,
    ) -> JobArray:
        """A job array, one member per index, as `job submit --array`; its members' ids
        are `.status.jobs`, in index order."""
        job = documents.job_document(
            command,
            project=project or self.project,
            cwd=cwd,
            name=name,
            labels=labels,
            spec_fields=spec_fields,
        )
        document = documents.array_document(job, indices, parallelism)
        return documents.as_array(self._wire.run(calls.create_array(document)))

    def apply(self, resources: Sequence[Document], *, dry_run: bool = False) -> ApplyResults:
        """Create or update each document (Jobs, Projects, ...), as `job apply`."""
        return self._wire.run(calls.apply(resources, dry_run=dry_run, objects=True))

    # -- reading jobs

    def get(self, ref: JobRef) -> Job:
        return documents.as_job(self._wire.run(calls.get_job(self.job_id(ref))))

    def list(
        self,
        project: str | None = None,
        selector: Selector | None = None,
        *,
        phase: str | Sequence[str] = (),
        name: str | None = None,
        limit: int | None = None,
    ) -> Jobs:
        """The jobs a user may see, filtered by the broker (`selector`: `k=v,k2!=v2`, or a
        mapping of equalities)."""
        call = calls.list_jobs(
            project=project,
            phase=[phase] if isinstance(phase, str) else list(phase),
            name=name,
            selector=documents.selector_text(selector),
            limit=limit,
        )
        return [documents.as_job(d) for d in self._wire.run(call).items]

    def watch(
        self,
        project: str | None = None,
        selector: Selector | None = None,
        *,
        name: str | None = None,
        phase: str | Sequence[str] = (),
        timeout: float | None = None,
    ) -> Iterator[tuple[str, Job]]:
        """(op, job) for each job as listed now (ADDED), then for each change after
        (ADDED, MODIFIED, DELETED), until `timeout` seconds have passed (never by default)."""
        jobs = JobFilter(
            project=project,
            name=name,
            phases=(phase,) if isinstance(phase, str) else tuple(phase),
            selector=documents.selector_text(selector),
        )
        deadline = None if timeout is None else time.monotonic() + timeout
        for delta in Informer(self._wire, jobs, deadline=deadline):
            yield delta.op, documents.as_job(delta.object)

    def wait(self, ref: JobRef, timeout: float | None = None) -> Job:
        """The job once it has ended (its final document); TimeoutError after `timeout`."""
        job = self.get(ref)
        if documents.is_terminal(job):
            return job
        watching = self.watch(job.metadata.project, name=job.metadata.name, timeout=timeout)
        for op, seen in watching:
            if seen.metadata.id != job.metadata.id:
                continue
            if op == "DELETED":
                raise wire.ApiError(404, f"job {job.metadata.id} was deleted while waited for")
            if documents.is_terminal(seen):
                return seen
        raise TimeoutError(f"job {job.metadata.id} did not end within {timeout:g} s")

    @overload
    def logs(
        self, ref: JobRef, follow: Literal[False] = False, *, rank: int | None = None
    ) -> str: ...

    @overload
    def logs(
        self, ref: JobRef, follow: Literal[True], *, rank: int | None = None
    ) -> Iterator[str]: ...

    def logs(
        self, ref: JobRef, follow: bool = False, *, rank: int | None = None
    ) -> str | Iterator[str]:
        """The job's output as text; with `follow`, an iterator of its lines that ends
        when the job has ended and every line is read (as `job logs -f`). A multi-host
        job's members interleave, each line behind `[rank N] `; `rank` reads one member's
        alone (as `job logs --rank N`)."""
        job_id = self.job_id(ref)
        if follow:
            return documents.lines(self._log_chunks(job_id, follow=True, rank=rank))
        return "".join(documents.lines(self._log_chunks(job_id, follow=False, rank=rank)))

    def log_tail(self, ref: JobRef, lines: int, *, rank: int | None = None) -> str:
        """The last `lines` lines of the job's output (of one member's, with `rank`)."""
        job_id = self.job_id(ref)
        chunks = self._log_chunks(job_id, follow=False, tail=lines, rank=rank)
        return "".join(documents.lines(chunks))

    def _log_chunks(
        self, job_id: int, *, follow: bool, tail: int | None = None, rank: int | None = None
    ) -> Iterator[bytes]:
        offset = 0
        while True:
            call = calls.read_logs(
                job_id, offset=offset, follow=follow, timeout=LOG_HOLD_S, tail=tail, rank=rank
            )
            chunk = self._wire.run(call)
            tail = None  # the tail says where to start; the rest reads on from there
            if chunk.data:
                yield chunk.data
            offset = chunk.offset
            if chunk.done or (not follow and not chunk.data):
                return

    # -- acting on jobs

    def cancel(self, ref: JobRef) -> Job:
        return documents.as_job(self._wire.run(calls.cancel_job(self.job_id(ref))))

    def preempt(self, ref: JobRef) -> Job:
        return documents.as_job(self._wire.run(calls.preempt_job(self.job_id(ref))))

    def resume(self, ref: JobRef, *, from_scratch: bool = False, force: bool = False) -> Job:
        """The new job continuing a preempted one, as `job resume`."""
        call = calls.resume_job(self.job_id(ref), from_scratch=from_scratch, force=force)
        return documents.as_job(self._wire.run(call))

    def delete(self, ref: JobRef) -> None:
        self._wire.run(calls.delete_job(self.job_id(ref)))

    def job_id(self, ref: JobRef) -> int:
        """The id of the job `ref` names (looked up by name when it is one)."""
        target = documents.ref_target(ref, self.project)
        if isinstance(target, int):
            return target
        project, name = target
        listing = self._wire.run(calls.list_jobs(project=project, name=name))
        return documents.named_job(listing.items, project, name)

    # -- the connection

    def close(self) -> None:
        self._wire.close()
