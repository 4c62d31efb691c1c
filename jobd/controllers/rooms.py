"""Workers indexed by kind and free room: a placement looks at one worker of each kind.

`choose_worker` (capacity.py) weighs every worker for every job: at a thousand workers a
scheduling pass spent over a millisecond per job it bound. Yet most of a fleet is alike:
workers of one inventory, labels and mount roots, with the same room free, are the same
place to a job but for their names, and choose_worker breaks a tie by name (the largest
wins). So the index keeps:

- the workers by *where-kind* (their labels, mount roots and published users: all
  eligibility reads of a worker but its name), so a job's selector, affinity, cwd and
  owner are judged once per kind, not once per worker, and a kind that may not take the
  job is passed over whole;
- within a kind, the workers by *room* (free slots, CPUs, memory, and GPUs with their
  memory, and the whole inventory the best fit measures against), each room with its
  workers' names in order, so only the last name of each room is weighed.

The choice is choose_worker's, by construction: the same measure (`capacity.best_of`) over
the same candidates, a room standing for its members. A worker holding room for a
nominated job is a room of its own (what it offers depends on the job), and a job pinned
to a worker is weighed against that worker alone. Taking room moves a worker to its new
room. A gang of N (`spec.nodes > 1`) weighs the index N times, each worker chosen taken
out of it until the choice is made (`choose_gang`): distinct workers, best fit each time.
Built from the pass's capacities (as many rooms as workers at worst, a few dozen for
a fleet of a few shapes), at the pass's second choice: building it costs about one walk
of every worker, so a pass that binds one job (a dispatch on an idle fleet) walks them
once, as before, and one that binds many pays the walk once. Nothing here reads the store.
"""

from __future__ import annotations

from bisect import insort
from typing import NamedTuple

from jobd.api.models import Job, Resources
from jobd.controllers import eligibility
from jobd.controllers.capacity import Capacity, Seat, best_of, choose_gang, choose_worker

__all__ = ["RoomIndex"]

# All eligibility reads of a worker but its name: (labels, mount roots, published users
# or None for any); None: no spec.
WhereKind = tuple[tuple[tuple[str, str], ...], tuple[str, ...], tuple[str, ...] | None] | None


class Room(NamedTuple):
    """Everything best_of and pick read of a worker but its name and its rules:
    workers of one kind with equal rooms are equal places to any job."""

    free_slots: int
    free_millicpus: int
    free_memory: int
    free_gpus: tuple[tuple[int, int], ...]  # (index, memory free on it)
    total_millicpus: int
    total_memory: int
    rooted: bool
    held_for: str | None  # room held for nominated jobs: a room of the worker's own

    def may_fit(self, needs: Resources) -> bool:
        """best_of's first comparisons, on the room's own numbers."""
        return (
            self.free_slots >= needs.slots
            and self.free_millicpus >= needs.millicpus
            and self.free_memory >= needs.memory_bytes
            and len(self.free_gpus) >= needs.gpus
        )


class RoomIndex:
    """The pass's capacities by where-kind, then by room; `choose` and `take` as
    choose_worker and Capacity.take would, the index kept current."""

    def __init__(self, caps: dict[str, Capacity]) -> None:
        self.caps = caps
        self._kinds: dict[WhereKind, dict[Room, list[str]]] = {}
        self._place: dict[str, tuple[WhereKind, Room]] = {}
        self._built = False
        self._walked = False  # the pass's first choice walked every worker

    def __len__(self) -> int:
        """How many rooms: what a job's choice weighs at most."""
        self._build()
        return sum(len(rooms) for rooms in self._kinds.values())

    def choose(self, job: Job) -> Capacity | None:
        """choose_worker(job, caps), weighing the last-named worker of each room."""
        if job.status.nominated_worker:
            return choose_worker(job, self.caps)
        if not self._walked:
            self._walked = True
            return choose_worker(job, self.caps)
        self._build()
        return self._best(job)

    def place(self, job: Job) -> Seat | None:
        """Where `job` goes: choose_gang's workers for a gang, else choose's."""
        return self.choose_gang(job) if job.spec.nodes > 1 else self.choose(job)

    def choose_gang(self, job: Job) -> list[Capacity] | None:
        """capacity.choose_gang(job, caps): N distinct workers, each weighed as `choose`
        weighs one, the chosen ones out of the index until all N are found."""
        if job.status.nominated_workers or not self._walked:
            self._walked = True  # as choose: the pass's first choice walks, unbuilt
            return choose_gang(job, self.caps)
        self._build()
        seats: list[Capacity] = []
        try:
            while len(seats) < job.spec.nodes:
                cap = self._best(job)
                if cap is None:
                    return None
                seats.append(cap)
                self._remove(cap.worker)
            return seats
        finally:
            for cap in seats:
                self._add(cap)

    def _best(self, job: Job) -> Capacity | None:
        """The best worker for `job` in the built index: the last-named of each room."""
        spec = job.spec
        if spec.worker is not None:
            return best_of(job, self._pinned(spec.worker))
        needs = spec.resources
        candidates = [
            self.caps[names[-1]]
            for kind, rooms in self._kinds.items()
            if _admits(job, kind)
            for room, names in rooms.items()
            if room.may_fit(needs)
        ]
        return best_of(job, candidates, admitted=True)

    def take(self, cap: Capacity, job: Job) -> list[int]:
        """Capacity.take, and `cap` moved to the room it has left."""
        if not self._built:
            return cap.take(job)
        self._remove(cap.worker)
        try:
            return cap.take(job)
        finally:
            self._add(cap)

    def _build(self) -> None:
        if not self._built:
            for cap in self.caps.values():
                self._add(cap)
            self._built = True

    def _pinned(self, name: str) -> list[Capacity]:
        """A pinned job's candidates: its worker, and any worker without a spec (no
        rules to keep it out, as pick() has it)."""
        ruleless = [n for names in self._kinds.get(None, {}).values() for n in names]
        # Those in the index: a gang's workers chosen so far are out of it.
        return [self.caps[n] for n in dict.fromkeys([name, *ruleless]) if n in self._place]

    def _add(self, cap: Capacity) -> None:
        kind, room = _where_kind(cap), _room(cap)
        insort(self._kinds.setdefault(kind, {}).setdefault(room, []), cap.worker)
        self._place[cap.worker] = (kind, room)

    def _remove(self, name: str) -> None:
        kind, room = self._place.pop(name)
        rooms = self._kinds[kind]
        rooms[room].remove(name)
        if not rooms[room]:
            del rooms[room]


def _where_kind(cap: Capacity) -> WhereKind:
    spec = cap.spec
    if spec is None:
        return None
    users = tuple(cap.users) if cap.users is not None else None
    return tuple(sorted(spec.labels.items())), tuple(spec.mount_roots), users


def _room(cap: Capacity) -> Room:
    return Room(
        cap.free_slots,
        cap.free_millicpus,
        cap.free_memory,
        tuple((g, cap.gpu_memory.get(g, 0)) for g in cap.free_gpus),
        cap.total_millicpus,
        cap.total_memory,
        cap.rooted,
        cap.worker if cap.reserved else None,
    )


def _admits(job: Job, kind: WhereKind) -> bool:
    """Whether workers of this kind may take the job (not pinned: the name plays no part)."""
    if kind is None:
        return True
    labels, roots, users = kind
    if not eligibility.knows_owner(job.metadata.owner, users):
        return False
    spec = job.spec
    if not roots and not eligibility.asks_where(spec):
        return True
    return eligibility.admits(spec, "", dict(labels), roots)
