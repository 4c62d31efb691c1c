"""Refill: the room a worker's reports free is bound in the reports' own commit.

When a report ends a job, its slot (or GPUs) is free at once. Left to the scheduler's
pass, the next job would cost a second transaction, a second hearing by the listeners
and a second watch answer to the worker; instead, inside the reports' transaction, the
queue's head is bound into that worker's room in the scheduler's order
(`scheduler.bind_into`), and the worker's watch hears of the end of one job and the
binding of the next in one answer. The scheduler's pass still follows the commit (a job
gave its slot back) and finds the room taken, or binds what is left.

Room held for a nominated job (capacity freed by preemption for it, the seed's rule) is
never given to another job: a worker holding any is not refilled here, and the
scheduler's pass, which holds the rule, binds the job it was freed for. Nor is a gang
(a job of several nodes) ever bound here, one worker's room being all a refill sees: the
binds stop at the first gang in the queue's order, so jobs behind it do not take, a
report at a time, the room it waits for; the scheduler's pass decides.

The worker's room is read on the loop from the view before its reports run
(`room_of`, the runner's `prepare`), then what the reports ended is given back to it
on the store's thread (`refill`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from jobd.api.models import BOUND_PHASES, Job
from jobd.controllers.capacity import capacity_of, give_back, reserve_nominated, schedulable
from jobd.controllers.context import Context
from jobd.controllers.fairqueue import fair_inputs
from jobd.controllers.scheduler import Room, bind_into

__all__ = ["Refill", "refill", "room_of"]


@dataclass
class Refill:
    """One worker's room before its reports, and the jobs counted as holding some of it."""

    worker: str
    room: Room
    counted: dict[int, Job]


def room_of(ctx: Context, worker: str) -> Refill | None:
    """On the loop: `worker`'s room as the view shows it, or None when it takes no new
    job now (not schedulable, not Ready, cordoned, its disk full) or holds room for a
    nominated job (left to the scheduler)."""
    view = ctx.view
    known = view.workers.get(worker)
    if known is None:
        return None
    bound = view.bound_to(worker)
    caps = capacity_of(schedulable([known], ctx.leases.heard), bound)
    if worker not in caps:
        return None
    reserve_nominated(view, caps)
    if caps[worker].reserved:
        return None
    room = Room(caps, dict(view.array_bound), fair_inputs(ctx), whole=False)
    return Refill(worker, room, {job.id: job for job in bound})


def refill(ctx: Context, plan: Refill, written: Iterable[Job]) -> None:
    """Inside the reports' transaction: give back what the jobs they ended held, then
    bind queued jobs into the worker's room. `written`: the jobs as the reports left them."""
    cap = plan.room.caps[plan.worker]
    arrays = plan.room.arrays
    for job in written:
        held = plan.counted.get(job.id)
        if held is None or job.status.phase in BOUND_PHASES:
            continue
        if held.status.worker != plan.worker:
            continue  # a gang's member here: capacity_of counts a job on its worker only
        give_back(cap, held)
        array = held.metadata.array
        if array is not None and array.parallelism is not None and arrays.get(array.id):
            arrays[array.id] -= 1
    if cap.has_room():
        bind_into(ctx, plan.room)
