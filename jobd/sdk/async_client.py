"""`jobd.AsyncClient`: `jobd.Client`'s verbs for asyncio (and anyio) programs.

The same documents (`documents.py`) over the wire's `AsyncClient`; `watch` is an async
iterator over the wire's `Reflector` (list, watch from the list's revision, list again
after a 410), `logs(follow=True)` an async iterator of lines.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, Literal, overload

from jobd.api.arrays import JobArray
from jobd.api.models import Job
from jobd.sdk import documents
from jobd.sdk.connection import find_broker
from jobd.sdk.documents import JobRef, Selector
from jobd.wire import calls
from jobd.wire import client as wire
from jobd.wire.answers import ApplyResult, Document
from jobd.wire.closing import AsyncClosing
from jobd.wire.informer import JobFilter, Reflector

__all__ = ["AsyncClient"]

Jobs = list[Job]
ApplyResults = list[ApplyResult]
LOG_HOLD_S = WATCH_HOLD_S = 30.0  # seconds the broker may hold a read


class AsyncClient(AsyncClosing):
    """`jobd.Client` for async code; use it as an async context manager, or aclose() it."""

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
        self.project = found.project
        self._wire = wire.open_brokers_async(
            found.server, found.token, timeout=timeout, user_agent="jobd-sdk"
        )

    async def submit(
        self,
        command: str | Sequence[str],
        *,
        project: str | None = None,
        cwd: str | None = None,
        name: str | None = None,
        labels: Mapping[str, str] | None = None,
        **spec_fields: Any,
    ) -> Job:
        document = documents.job_document(
            command,
            project=project or self.project,
            cwd=cwd,
            name=name,
            labels=labels,
            spec_fields=spec_fields,
        )
        return documents.as_job(await self._wire.run(calls.create_job(document)))

    async def submit_array(
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
        job = documents.job_document(
            command,
            project=project or self.project,
            cwd=cwd,
            name=name,
            labels=labels,
            spec_fields=spec_fields,
        )
        document = documents.array_document(job, indices, parallelism)
        return documents.as_array(await self._wire.run(calls.create_array(document)))

    async def apply(self, resources: Sequence[Document], *, dry_run: bool = False) -> ApplyResults:
        return await self._wire.run(calls.apply(resources, dry_run=dry_run, objects=True))

    async def get(self, ref: JobRef) -> Job:
        document = await self._wire.run(calls.get_job(await self.job_id(ref)))
        return documents.as_job(document)

    async def list(
        self,
        project: str | None = None,
        selector: Selector | None = None,
        *,
        phase: str | Sequence[str] = (),
        name: str | None = None,
        limit: int | None = None,
    ) -> Jobs:
        call = calls.list_jobs(
            project=project,
            phase=[phase] if isinstance(phase, str) else list(phase),
            name=name,
            selector=documents.selector_text(selector),
            limit=limit,
        )
        return [documents.as_job(d) for d in (await self._wire.run(call)).items]

    async def watch(
        self,
        project: str | None = None,
        selector: Selector | None = None,
        *,
        name: str | None = None,
        phase: str | Sequence[str] = (),
        timeout: float | None = None,
    ) -> AsyncIterator[tuple[str, Job]]:
        """(op, job) as listed now, then for each change, until `timeout` seconds."""
        reflector = Reflector(
            JobFilter(
                project=project,
                name=name,
                phases=(phase,) if isinstance(phase, str) else tuple(phase),
                selector=documents.selector_text(selector),
            )
        )
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            hold = (
                WATCH_HOLD_S if deadline is None else min(WATCH_HOLD_S, deadline - time.monotonic())
            )
            if hold <= 0 and not reflector.must_list:
                return
            if reflector.revision is None:
                deltas = reflector.listed(await self._wire.run(reflector.jobs.list_call()))
            else:
                call = reflector.jobs.watch_call(reflector.revision, hold)
                try:
                    deltas = reflector.watched(await self._wire.run(call))
                except wire.ApiError as exc:
                    reflector.failed(exc)  # a 410: list again; anything else raises
                    continue
            for delta in deltas:
                yield delta.op, documents.as_job(delta.object)

    async def wait(self, ref: JobRef, timeout: float | None = None) -> Job:
        """The job once it has ended; TimeoutError after `timeout` seconds."""
        job = await self.get(ref)
        if documents.is_terminal(job):
            return job
        async for op, seen in self.watch(
            job.metadata.project, name=job.metadata.name, timeout=timeout
        ):
            if seen.metadata.id != job.metadata.id:
                continue
            if op == "DELETED":
                raise wire.ApiError(404, f"job {job.metadata.id} was deleted while waited for")
            if documents.is_terminal(seen):
                return seen
        raise TimeoutError(f"job {job.metadata.id} did not end within {timeout} s")

    @overload
    async def logs(
        self, ref: JobRef, follow: Literal[False] = False, *, rank: int | None = None
    ) -> str: ...

    @overload
    async def logs(
        self, ref: JobRef, follow: Literal[True], *, rank: int | None = None
    ) -> AsyncIterator[str]: ...

    async def logs(
        self, ref: JobRef, follow: bool = False, *, rank: int | None = None
    ) -> str | AsyncIterator[str]:
        """The job's output so far, as text; with `follow`, `follow_logs(ref)`. `rank`
        reads one member of a multi-host job (as `job logs --rank N`)."""
        if follow:
            return self.follow_logs(ref, rank=rank)
        job_id = await self.job_id(ref)
        chunks = [b async for b in self._log_chunks(job_id, False, rank)]
        return "".join(documents.lines(chunks))

    async def follow_logs(self, ref: JobRef, *, rank: int | None = None) -> AsyncIterator[str]:
        """The job's output line by line, until it has ended and every line is read."""
        job_id = await self.job_id(ref)
        splitter = documents.Lines()
        async for chunk in self._log_chunks(job_id, True, rank):
            for line in splitter.feed(chunk):
                yield line
        for line in splitter.end():
            yield line

    async def _log_chunks(
        self, job_id: int, follow: bool, rank: int | None
    ) -> AsyncIterator[bytes]:
        offset = 0
        while True:
            call = calls.read_logs(
                job_id, offset=offset, follow=follow, timeout=LOG_HOLD_S, rank=rank
            )
            chunk = await self._wire.run(call)
            if chunk.data:
                yield chunk.data
            offset = chunk.offset
            if chunk.done or (not follow and not chunk.data):
                return

    async def cancel(self, ref: JobRef) -> Job:
        return documents.as_job(await self._wire.run(calls.cancel_job(await self.job_id(ref))))

    async def preempt(self, ref: JobRef) -> Job:
        return documents.as_job(await self._wire.run(calls.preempt_job(await self.job_id(ref))))

    async def resume(self, ref: JobRef, *, from_scratch: bool = False, force: bool = False) -> Job:
        call = calls.resume_job(await self.job_id(ref), from_scratch=from_scratch, force=force)
        return documents.as_job(await self._wire.run(call))

    async def delete(self, ref: JobRef) -> None:
        await self._wire.run(calls.delete_job(await self.job_id(ref)))

    async def job_id(self, ref: JobRef) -> int:
        target = documents.ref_target(ref, self.project)
        if isinstance(target, int):
            return target
        project, name = target
        listing = await self._wire.run(calls.list_jobs(project=project, name=name))
        return documents.named_job(listing.items, project, name)

    async def aclose(self) -> None:
        await self._wire.aclose()
