"""The scheduler: binds pending jobs to workers with a free slot (CPU jobs) or free GPUs,
and the CPUs and memory a job names free there, among the workers it may run on.

One key, "queue": each pass reads the workers and the jobs bound to them (work that
grows with what runs, not with history), then walks ready Pending jobs highest priority
first, FIFO within a priority, off an index, stopping as soon as no capacity is left.
Capacity freed by preemption is held for the job it was freed for (its
`nominated_worker`): no other job may take it first (capacity.py). Binding is the state
machine's `bind` (transitions.py). A gang (`spec.nodes = N > 1`) is bound only when N
distinct workers each have room for one member (rooms.choose_gang), all in one write
(`bind_gang`); else it is passed over holding nothing, as a job that fits nowhere is, so
two gangs waiting never hold part of each other's workers. Next stage: the worker sees
the binding through its watch and starts the process.
"""

from __future__ import annotations

from collections.abc import Iterable
from contextlib import suppress
from typing import NamedTuple

from jobd.api.models import BOUND_PHASES, Job, Member, Phase
from jobd.api.wait_reasons import WaitReason
from jobd.controllers import transitions
from jobd.controllers.capacity import (
    Capacity,
    Seat,
    capacity_of,
    reserve_nominated,
    schedulable,
)
from jobd.controllers.context import Context
from jobd.controllers.fairqueue import FairInputs, FairPass, fair_inputs
from jobd.controllers.queueing import DONE, Result
from jobd.controllers.rooms import RoomIndex
from jobd.store.base import Change, Conflict, EventRecord, Fits, QueueHead

__all__ = ["QUEUE_KEY", "Room", "SchedulerController", "bind_into", "bind_new", "free_room"]

QUEUE_KEY = "queue"
# How many queued jobs one pass may look at beyond those it binds (like Slurm's
# bf_max_job_test): a queue of jobs that fit nowhere must not make every pass long.
_SCAN_LIMIT = 128


class SchedulerController:
    name = "scheduler"
    # A change on an idle broker is looked at at once (a job waits for no timer to be
    # bound); under load, passes start at least this far apart, so the changes of a
    # couple of milliseconds make one pass, not one each.
    pass_spacing_s = 0.002
    # A worker's change (a registration, a cordon lifted) waits this long for its pass,
    # so a fleet registering at once makes a pass per tenth of a second (manager.py).
    worker_coalesce_s = 0.1

    def __init__(self, ctx: Context, queue: QueueHead | None = None) -> None:
        self.ctx = ctx
        self.resync_s = ctx.settings.sweep_interval_s
        # Binding into one worker's room (a report's refill), where no gang can be placed:
        # a gang met in the queue's order stops the binds (bind_into).
        self.partial = False
        # Where queued jobs are read: the store's index, or a create's new jobs (bind_new).
        self.queue_head = queue or ctx.store.queue_head
        # Each job bound, as written, when the caller answers with them (bind_new).
        self.written: dict[int, Job] | None = None

    def keys_for(self, change: Change) -> Iterable[str]:
        if change.kind in _WORKER_OR_PROJECT:  # a project's quota or shares may have moved
            return [QUEUE_KEY]
        job = change.job
        if job is None:
            return []
        status = job.status
        # A new ready job, or a job that gave its slot back, may let something run. A
        # new job its create bound in the same commit (placing_new.py) the view holds
        # bound already: that create did this pass's work.
        if status.phase == Phase.PENDING and status.dependencies_met:
            return [] if job.id in self.ctx.view.bound else [QUEUE_KEY]
        if status.phase not in _BOUND or change.op == "DELETED":
            return [QUEUE_KEY] if status.worker else []
        return []

    def keys_all(self) -> Iterable[str]:
        return [QUEUE_KEY]

    async def reconcile(self, key: str) -> Result:
        # Most passes under load end here, on memory alone: no room anywhere.
        room = free_room(self.ctx)
        if room is None:
            return DONE
        # Capacity is counted on the loop, from the view, once the store work before this
        # pass has been heard (a report's commit may have bound into room the view showed
        # free); the queue is read and bound on the store's thread off the loop
        # (store/runner.py), which never sees the view: it binds against copies.
        if await self.ctx.runner.run_prepared(lambda: self._room(room), self._bind_room):
            self.ctx.enqueue(self.name, QUEUE_KEY)  # a job changed; the next pass sees why
        return DONE

    def _room(self, read: Room) -> Room | None:
        """`read` inline, where nothing ran since it was read (capacity_of walks every
        worker: once a pass); off the loop, read again after the units before this one."""
        room = free_room(self.ctx) if self.ctx.runner.off_loop else read
        if room is not None:
            reserve_nominated(self.ctx.view, room.caps)
        return room

    def _bind_room(self, room: Room | None) -> bool:
        if room is None:
            return False
        return self._bind_queued(room.caps, room.arrays, room.fair)

    def _bind_queued(
        self, caps: dict[str, Capacity], arrays: dict[int, int], fair: FairInputs | None = None
    ) -> bool:
        """Bind ready queued jobs into `caps`, best first; True when a bind lost a race.

        `arrays`: how many members of each array with a parallelism cap are bound; a
        member past its array's cap is passed over (Slurm's JobArrayTaskLimit).

        The pass's binds share one commit (a bind that loses its race changes nothing and
        the others go on): one transaction and one hearing by the listeners for the jobs a
        burst of freed slots lets start, not one each, and the worker's watch gets them
        in one answer.
        """
        with self.ctx.store.batch():
            if fair is not None:  # fair share between projects, or quotas (fairqueue.py)
                return self._bind_fair(fair, caps, arrays)
            return self._bind_pages(caps, arrays)

    def _bind_fair(
        self, fair: FairInputs, caps: dict[str, Capacity], arrays: dict[int, int]
    ) -> bool:
        def admit(job: Job) -> bool:
            return _under_array_cap(job, arrays)

        rooms = RoomIndex(caps)  # a job weighs one worker of each kind and room

        def bind(job: Job, seat: Seat) -> bool:
            bound = self._bind(job, seat, rooms)
            if bound and job.metadata.array is not None:
                arrays[job.metadata.array.id] = arrays.get(job.metadata.array.id, 0) + 1
            return bound

        page = min(_SCAN_LIMIT, max(8, 2 * _room(caps.values())))

        def place(job: Job) -> Seat | None:
            return self._place(job, rooms)

        fits = _fits(caps)
        fair_pass = FairPass(self.ctx, fair, caps, fits, page, bind, admit, place, self.queue_head)
        return fair_pass.run(_SCAN_LIMIT, lambda: _room(caps.values()))

    def _bind_pages(self, caps: dict[str, Capacity], arrays: dict[int, int]) -> bool:
        after: tuple[int, int] | None = None
        scanned, raced = 0, False
        rooms = RoomIndex(caps)  # a job weighs one worker of each kind and room
        while scanned < _SCAN_LIMIT and (free := _room(caps.values())):
            # Read about as many queued jobs as could start: a pass costs what it binds.
            # (Twice that; a page whose jobs all go unbound is followed by the next one.
            # A floor of 8 parsed six bodies more than a one-slot pass binds.) A refill
            # (`partial`: one worker's room, verbs/refill.py) reads no more than could
            # start: no gang is bound there and `fits` leaves out what its room cannot
            # hold, so its page binds whole but for a rare job placement turns away; a
            # second page of a refill that did is the exception, not a page per report.
            size = min(_SCAN_LIMIT - scanned, free if self.partial else 2 * free)
            # Jobs too big for every worker's free room stay in the index, unread.
            fits = _fits(caps)
            page = self.queue_head(size, fits, after)
            lost, past_full_array = self._bind_page(page, rooms, arrays)
            raced = raced or lost
            scanned += len(page)
            if past_full_array is not None:  # the rest of that array's members: unread
                after = past_full_array
            elif len(page) < size:
                break
            else:
                after = (page[-1].status.effective.priority, page[-1].id)
        return raced

    def _bind_page(
        self, page: list[Job], rooms: RoomIndex, arrays: dict[int, int]
    ) -> tuple[bool, tuple[int, int] | None]:
        """Bind what fits of one page; True when a bind lost a race, and, when a member of
        a full array was met, where the next page starts: past that array's members."""
        raced = False
        for job in page:
            if not _under_array_cap(job, arrays):
                self._say(job, WaitReason.ARRAY_PARALLELISM, _capped(job))
                past = _past_array(job)
                if past is not None:
                    return raced, past
                continue
            seat = self._place(job, rooms)
            if seat is not None:
                bound = self._bind(job, seat, rooms)
                raced = not bound or raced
                if bound and job.metadata.array is not None:
                    arrays[job.metadata.array.id] = arrays.get(job.metadata.array.id, 0) + 1
            elif job.metadata.array is not None:  # under its cap now: it waits for room
                self._say(job, WaitReason.WAITING_FOR_CAPACITY, transitions.ROOM_TAKEN)
        return raced, None

    def _say(self, job: Job, reason: WaitReason, message: str) -> None:
        """Write why `job` waits where the pass decided it, if the job says otherwise:
        once per change of reason (the write is then skipped), never once per pass."""
        said, _ = transitions.wait_reason(job, reason, message, self.ctx.clock.now())
        if said is not job:
            with suppress(Conflict):  # the job moved meanwhile; its next read says why
                self.ctx.store.update_job(said, [])

    def _place(self, job: Job, rooms: RoomIndex) -> Seat | None:
        """Where `job` goes (rooms.place); _GangAhead for a gang in a partial pass."""
        if self.partial and job.spec.nodes > 1:
            raise _GangAhead(job.id)
        return rooms.place(job)

    def _bind(self, job: Job, seat: Seat, rooms: RoomIndex | None = None) -> bool:
        """Bind `job` into `seat` (through `rooms`, which the plain pass keeps current)."""
        if isinstance(seat, list):
            return self._bind_gang(job, seat, rooms)
        gpus = rooms.take(seat, job) if rooms is not None else seat.take(job)
        bound, events = transitions.bind(job, seat.worker, gpus, self.ctx.clock.now())
        return self._write(bound, events)

    def _bind_gang(self, job: Job, seats: list[Capacity], rooms: RoomIndex | None) -> bool:
        """Bind a gang into one seat per member (rank order), in one write."""
        members = []
        for rank, cap in enumerate(seats):
            gpus = rooms.take(cap, job) if rooms is not None else cap.take(job)
            members.append(Member(rank=rank, worker=cap.worker, address=cap.address, gpus=gpus))
        bound, events = transitions.bind_gang(job, members, self.ctx.clock.now())
        return self._write(bound, events)

    def _write(self, bound: Job, events: list[EventRecord]) -> bool:
        """Write a bind; False when it lost its race (the job moved meanwhile)."""
        try:
            stored = self.ctx.store.update_job(bound, events)
        except Conflict:
            return False
        if self.written is not None:
            self.written[stored.id] = stored
        return True


class Room(NamedTuple):
    """Free capacity to bind into, read on the loop: each worker's, how many members of
    each array with a parallelism cap are bound, and the fair-share inputs (None: plain
    priority-then-id order). Copies: the store's thread may bind against them. `whole`:
    every schedulable worker's room; False for one worker's (a report's refill)."""

    caps: dict[str, Capacity]
    arrays: dict[int, int]
    fair: FairInputs | None
    whole: bool = True


class _GangAhead(Exception):
    """A partial pass met a gang in the queue's order: it needs workers this pass does
    not see, so the binds stop there and the scheduler's pass over every worker decides
    (else jobs behind it would take, one report at a time, the room it waits for)."""


def free_room(ctx: Context, fair: bool = True) -> Room | None:
    """The room the view shows on the schedulable workers; None when no worker has a free
    slot or GPU. Held capacity is not yet taken out (reserve_nominated). `fair` False:
    the caller works out the fair-share inputs (placing_new.py)."""
    view = ctx.view
    caps = capacity_of(schedulable(view.workers.values(), ctx.leases.heard), view.bound.values())
    if not any(c.has_room() for c in caps.values()):
        return None
    return Room(caps, dict(view.array_bound), fair_inputs(ctx) if fair else None)


def bind_into(ctx: Context, room: Room) -> bool:
    """Bind ready queued jobs into `room` as a pass would (fair share and quotas when
    set, else priority then id); True when a bind lost a race. Inside the caller's
    transaction (a worker's reports: verbs/refill.py), so no batch of its own. A room
    not `whole` binds no further than the first gang in the queue's order: True then,
    as the scheduler's pass has a job to look at."""
    return _bind_into(SchedulerController(ctx), room)


def bind_new(ctx: Context, room: Room, queue: QueueHead) -> dict[int, Job]:
    """Bind the jobs `queue` holds into `room` as a pass would (bind_into): a create's
    new jobs, inside its transaction (verbs/placing_new.py). Each job bound, as written."""
    scheduler = SchedulerController(ctx, queue)
    scheduler.written = {}
    _bind_into(scheduler, room)
    return scheduler.written


def _bind_into(scheduler: SchedulerController, room: Room) -> bool:
    scheduler.partial = not room.whole
    try:
        if room.fair is not None:
            return scheduler._bind_fair(room.fair, room.caps, room.arrays)
        return scheduler._bind_pages(room.caps, room.arrays)
    except _GangAhead:
        return True


def _under_array_cap(job: Job, arrays: dict[int, int]) -> bool:
    """Whether one more member of `job`'s array may be bound (always, outside an array
    or without a cap)."""
    array = job.metadata.array
    if array is None or array.parallelism is None:
        return True
    return arrays.get(array.id, 0) < array.parallelism


def _capped(job: Job) -> str:
    array = job.metadata.array
    return transitions.array_capped(array.parallelism or 0 if array else 0)


def _past_array(job: Job) -> tuple[int, int] | None:
    """The queue's position after the last member of `job`'s array (members have
    consecutive ids); None when the array does not say its last member."""
    array = job.metadata.array
    if array is None or array.last_member is None or array.last_member <= job.id:
        return None
    return (job.status.effective.priority, array.last_member)


def _fits(caps: dict[str, Capacity]) -> Fits:
    """The most any one worker has free of each: bigger jobs stay in the index, unread."""
    return Fits(
        max(max(0, c.free_slots) for c in caps.values()),
        max(len(c.free_gpus) for c in caps.values()),
        max(max(0, c.free_millicpus) for c in caps.values()),
        max(max(0, c.free_memory) for c in caps.values()),
    )


def _room(caps: Iterable[Capacity]) -> int:
    """How many more jobs could start at most: free slots and free GPUs together."""
    return sum(max(0, c.free_slots) + len(c.free_gpus) for c in caps)


_BOUND = {p.value for p in BOUND_PHASES}
_WORKER_OR_PROJECT = frozenset({"Worker", "Project"})
