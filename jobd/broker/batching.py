"""Group commit for single-job creates.

Many clients submitting at once would each pay a commit (an fsync with SQLite in FULL
mode). Creates that arrive in the same turn of the event loop are admitted and written in
one transaction instead; only if that batch fails is each retried alone, so one bad
request still gets its own error and the others still succeed.

There is no waiting for company: the batch is written at the next turn of the loop. Under
load the batches grow by themselves, as requests pile up in the sockets while a commit
runs; a lone create is not held up (a 2 ms window cost `dispatch` its latency and bought
`submit` no throughput).

A batch the store could not write at all (StoreUnavailable: a full disk, a server that is
down) is not retried alone: every create of it gets that error (507 or 503), and none is
acknowledged, since none was committed.

Off the loop (PostgreSQL, store/runner.py) a batch is written on the store's thread while
the next one gathers: one batch in flight at a time, and the one behind it is written as
soon as it lands, so batches grow while the server works instead of queueing up.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from functools import partial

from jobd.api.models import Job, Project, Worker
from jobd.controllers.context import Context
from jobd.controllers.placement import Shape, shapes_of
from jobd.controllers.verbs.admission import create_jobs
from jobd.controllers.verbs.placing_new import NewRoom, one_commit, place_new, room_for_new
from jobd.store.base import StoreUnavailable

__all__ = ["CreateBatcher"]


class CreateBatcher:
    def __init__(self, ctx: Context, max_batch: int = 256, window_s: float = 0.0) -> None:
        self.ctx = ctx
        self.max_batch = max_batch
        self.window_s = window_s  # how long the first create of a batch waits; 0: next turn
        self._pending: list[tuple[Job, asyncio.Future[Job]]] = []
        self._in_flight = False  # off the loop: a batch is being written on the store's thread
        self._tasks: set[asyncio.Task[None]] = set()

    async def create(self, job: Job) -> Job:
        future: asyncio.Future[Job] = asyncio.get_running_loop().create_future()
        self._pending.append((job, future))
        if len(self._pending) == 1:
            asyncio.get_running_loop().call_later(self.window_s, self._flush)
        elif len(self._pending) >= self.max_batch:
            self._flush()
        return await future

    def _flush(self) -> None:
        if self.ctx.runner.off_loop:
            self._flush_off_loop()
            return
        batch, self._pending = self._pending, []
        if not batch:
            return
        try:
            jobs = [job for job, _ in batch]
            created = self._create(jobs, room_for_new(self.ctx, jobs))
        except StoreUnavailable as exc:
            for _, future in batch:
                if not future.done():
                    future.set_exception(exc)
            return
        except Exception:
            for job, future in batch:
                self._create_alone(job, future)
            return
        for (_, future), job in zip(batch, created, strict=True):
            if not future.done():
                future.set_result(job)

    def _create(self, jobs: list[Job], plan: NewRoom | None = None) -> list[Job]:
        """Admit and insert; the view's workers judge at once whether any could run each;
        what `plan`'s room takes is bound in the same commit (placing_new.py)."""
        view = self.ctx.view
        shapes = view.of_workers(_fleet_shapes)
        return _create_placed(self.ctx, plan, jobs, view.projects, shapes)

    # -- off the loop: the store's thread writes, the loop settles the futures

    def _flush_off_loop(self) -> None:
        if self._in_flight or not self._pending:
            return  # the batch in flight flushes again when it lands
        batch, self._pending = self._pending, []
        self._in_flight = True
        task = asyncio.get_running_loop().create_task(self._write(batch))
        self._tasks.add(task)  # held, so the loop does not drop it half way
        task.add_done_callback(self._tasks.discard)

    async def _write(self, batch: list[tuple[Job, asyncio.Future[Job]]]) -> None:
        try:
            await self._write_batch(batch)
        finally:
            self._in_flight = False
            self._flush_off_loop()

    async def _write_batch(self, batch: list[tuple[Job, asyncio.Future[Job]]]) -> None:
        # The view is the loop's: the thread is handed copies of what admission reads.
        view = self.ctx.view
        projects, shapes = dict(view.projects), view.of_workers(_fleet_shapes)
        try:
            jobs = [job for job, _ in batch]
            created = await self._create_on_thread(jobs, projects, shapes, place=True)
        except StoreUnavailable as exc:
            _settle(batch, error=exc)
            return
        except Exception:
            for job, future in batch:
                try:
                    alone = await self._create_on_thread([job], projects, shapes)
                except Exception as exc:
                    _settle([(job, future)], error=exc)
                else:
                    _settle([(job, future)], created=alone)
            return
        _settle(batch, created=created)

    async def _create_on_thread(
        self,
        jobs: list[Job],
        projects: dict[str, Project],
        shapes: frozenset[Shape],
        place: bool = False,
    ) -> list[Job]:
        """Created on the store's thread; `place`: bound, what a worker has room for, in the
        same commit (the room read on the loop when the units before have ended)."""
        ctx = self.ctx

        def prepare() -> NewRoom | None:
            return room_for_new(ctx, jobs) if place else None

        create = partial(_create_placed, ctx, jobs=jobs, projects=projects, shapes=shapes)
        return await ctx.runner.run_prepared(prepare, create)

    def _create_alone(self, job: Job, future: asyncio.Future[Job]) -> None:
        try:
            result = self._create([job])[0]
        except Exception as exc:
            if not future.done():
                future.set_exception(exc)
        else:
            if not future.done():
                future.set_result(result)


def _create_placed(
    ctx: Context,
    plan: NewRoom | None,
    jobs: list[Job],
    projects: Mapping[str, Project],
    shapes: frozenset[Shape],
) -> list[Job]:
    with one_commit(ctx, plan):
        created = create_jobs(ctx.store, jobs, ctx.clock, projects, shapes=shapes)
        return place_new(ctx, plan, created)


def _settle(
    batch: list[tuple[Job, asyncio.Future[Job]]],
    created: list[Job] | None = None,
    error: Exception | None = None,
) -> None:
    """Each create's answer: its job as created, or the error of its batch."""
    for i, (_, future) in enumerate(batch):
        if future.done():
            continue
        if created is not None:
            future.set_result(created[i])
        else:
            assert error is not None
            future.set_exception(error)


def _fleet_shapes(workers: Iterable[Worker]) -> frozenset[Shape]:
    """The workers' shapes, as admission judges a create against them (placement.py):
    kept by the view until a worker changes, shared by every create meanwhile."""
    return frozenset(shapes_of(workers))
