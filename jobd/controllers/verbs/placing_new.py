"""Placing new jobs: a job created while a worker has room for it is bound in the create's
own commit.

On an idle broker a create cost two commits before the worker heard of its job: the
create's, then, once the listeners had heard it and the scheduler's pass had run, the
bind's, heard again. Instead, the create (a batch of `POST /jobs`, an apply's jobs) runs
the scheduler's own placement over its new jobs inside its transaction
(`scheduler.bind_new`): the same room (room held for a nominated job kept back,
`reserve_nominated`), the same order (priority, then id; fair share and quotas through
FairPass when they matter), a gang all or nothing, the same `transitions.bind` and its
events. The worker's watch hears of the job already bound, in one answer.

Only while the queue holds no ready job: a new job must not go ahead of a queued one of
higher or equal priority that fits the same room, and the jobs already queued are the
pass's (it follows every commit). Nor when no worker has room: a create then costs the
look at the view's free room, on the loop, and no more. The scheduler's pass still
follows the commit, and finds the room taken or binds what is left.

The room and fair share's basis are read on the loop (`room_for_new`, the runner's
`prepare`); the binds are made where the create writes (`place_new`, inside
`one_commit`). Next stage: the worker sees the binding through its watch.
"""

from __future__ import annotations

from collections.abc import Iterable
from contextlib import AbstractContextManager, nullcontext
from typing import NamedTuple

from jobd.api.models import Job, Phase
from jobd.controllers.capacity import reserve_nominated
from jobd.controllers.context import Context
from jobd.controllers.fairqueue import FairBasis, fair_basis
from jobd.controllers.scheduler import Room, bind_new, free_room
from jobd.store.base import Fits

__all__ = ["NewRoom", "one_commit", "place_new", "room_for_new"]


class NewRoom(NamedTuple):
    """The free room new jobs may take, and what fair share and quotas read, from the view."""

    room: Room
    basis: FairBasis


def room_for_new(ctx: Context, jobs: Iterable[Job] | None = None) -> NewRoom | None:
    """On the loop: the room the view shows, or None when the queue holds a ready job
    (the pass's to order) or no worker has room (nothing to place). `jobs`: the new
    jobs, when known before they are read off the loop: of one project, no usage is
    worked out (fair share orders between projects only)."""
    if ctx.view.queued:
        return None
    room = free_room(ctx, fair=False)
    if room is None:
        return None
    reserve_nominated(ctx.view, room.caps)
    one_project = jobs is not None and len({job.project for job in jobs}) <= 1
    return NewRoom(room, fair_basis(ctx, usage=not one_project))


def one_commit(ctx: Context, plan: NewRoom | None) -> AbstractContextManager[None]:
    """The create's writes and its binds in one transaction (durable: a create is what a
    user is told); nothing of its own when there is nothing to place."""
    return nullcontext() if plan is None else ctx.store.batch(durable=True)


def place_new(ctx: Context, plan: NewRoom | None, created: list[Job]) -> list[Job]:
    """Inside `one_commit`: bind what of `created` the room takes, in the scheduler's
    order; `created`, a bound job in its bound version (why another waits, when the
    pass's rules write it, is a later version, as it was when the pass wrote it)."""
    if plan is None:
        return created
    queue = _NewJobs(created)
    if not queue.ready:
        return created
    room = plan.room._replace(fair=plan.basis.inputs(queue.projects()))
    bound = bind_new(ctx, room, queue.head)
    return [bound.get(job.id, job) for job in created]


class _Order(NamedTuple):
    """The scheduler's order: highest priority first, then first come."""

    rank: int  # the priority, negated
    id: int


class _NewJobs:
    """A create's ready jobs, read as `queue_head` reads the store's index."""

    def __init__(self, jobs: list[Job]) -> None:
        self.ready = sorted(
            (j for j in jobs if j.status.phase == Phase.PENDING and j.status.ready), key=_order
        )

    def projects(self) -> list[str]:
        return sorted({job.project for job in self.ready})

    def head(
        self,
        limit: int,
        fits: Fits,
        after: tuple[int, int] | None = None,
        project: str | None = None,
    ) -> list[Job]:
        past = _Order(-after[0], after[1]) if after is not None else None
        found: list[Job] = []
        for job in self.ready:
            if len(found) == limit:
                break
            if past is not None and _order(job) <= past:
                continue
            if (project is None or job.project == project) and _fits(job, fits):
                found.append(job)
        return found


def _order(job: Job) -> _Order:
    return _Order(-job.status.effective.priority, job.id)


def _fits(job: Job, fits: Fits) -> bool:
    needs = job.spec.resources
    return (
        needs.slots <= fits.slots
        and needs.gpus <= fits.gpus
        and needs.millicpus <= fits.millicpus
        and needs.memory_bytes <= fits.memory
    )
