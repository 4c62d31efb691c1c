"""The capacity model: what each Ready worker has free, and what is held for whom.

Pure policy shared by the scheduler (which binds into free room) and the preemption
verbs and sweeper (which free room for a queued job, then hold it for that job, its
`nominated_worker`, so no other job takes it first). Built from the cluster view's
workers and bound jobs; nothing here reads the store.

A job of several nodes (a gang, `spec.nodes > 1`) holds its `resources` on each of its
members' workers (`status.members`, each with its own GPUs), is held room for on each of
its `nominated_workers`, and is placed on N distinct workers at once (`choose_gang`) or
not at all: a gang waiting holds nothing.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Sequence
from dataclasses import dataclass, field

from jobd.api.models import Job, Resources, Worker, WorkerPhase, WorkerSpec
from jobd.controllers import eligibility
from jobd.controllers.eligibility import eligible
from jobd.controllers.view import ClusterView
from jobd.controllers.worker_disk import disk_is_full

__all__ = [
    "Capacity",
    "PlacementKey",
    "Seat",
    "best_of",
    "capacity_of",
    "choose_gang",
    "choose_seat",
    "choose_worker",
    "empty_capacity",
    "give_back",
    "hold_for",
    "holdings",
    "nominated_on",
    "reserve_nominated",
    "room_on_its_way",
    "schedulable",
]


@dataclass
class Capacity:
    """What one worker has left, with the reservations made for nominated jobs.

    Two pools (Resources): CPU slots for CPU-only jobs, GPUs for GPU jobs. A GPU's
    memory is what it has less what processes jobd did not start use on it; a GPU
    whose memory is unknown takes only jobs that ask for no gpu_memory. On top of
    either, the CPUs (in thousandths) and memory jobs name: a job fits where every
    dimension it asks for is free at once.
    """

    worker: str
    free_slots: int
    free_gpus: list[int]
    # GPU index -> bytes free on it (its memory less foreign use); absent: unknown.
    gpu_memory: dict[int, int] = field(default_factory=dict)
    # job id -> what is held for it: its slot or its GPUs (the ones it would be given),
    # or a GPU freed for a nominated job could go to another job first.
    reserved: dict[int, Resources] = field(default_factory=dict)
    free_millicpus: int = 0
    free_memory: int = 0
    # The worker's spec, for eligibility (labels, mount roots: eligibility.py) and for
    # its whole inventory (best fit); None: every job is eligible, inventory none.
    spec: WorkerSpec | None = None
    rooted: bool = False  # whether the worker names mount roots
    # The whole inventory in CPUs (thousandths) and memory: the best fit's measure.
    total_millicpus: int = 0
    total_memory: int = 0
    # The owners whose jobs may run here (its status.users, as published: not copied, as
    # capacities are built every pass); None: any (eligibility.py). See knows().
    users: Sequence[str] | None = None
    _user_set: frozenset[str] | None = field(default=None, repr=False, compare=False)
    # Where a gang's members on this worker are reached (its status.address, else its
    # hostname): kept in a gang's `status.members` at bind.
    address: str | None = None

    def knows(self, owner: str | None) -> bool:
        """Whether a job of `owner` may run here; the names hashed once, on first need."""
        if owner is None or self.users is None:
            return True
        if self._user_set is None:
            self._user_set = frozenset(self.users)
        return owner in self._user_set

    def pick(self, job: Job, *, admitted: bool = False) -> list[int] | None:
        """The GPUs `job` would get here ([] for a CPU job); None when it does not fit.

        What is held for other nominated jobs is not offered: their slot, CPUs and
        memory, and the GPUs they would be given (those free now that fit them, up to
        their count). `admitted`: the job is known to be eligible here.
        """
        spec = job.spec
        if self.users is not None and not self.knows(job.metadata.owner):
            return None
        # Eligibility first, checked only where there is something to check: this runs
        # for every queued job against every worker on the scheduler's hot path.
        where = not admitted and (
            self.rooted or spec.worker is not None or spec.node_selector or spec.node_affinity
        )
        if where and self.spec is not None and not eligible(spec, self.worker, self.spec):
            return None
        if self.reserved:
            slots, gpus, millicpus, memory = self._offered(job)
        else:
            slots, gpus = self.free_slots, self.free_gpus
            millicpus, memory = self.free_millicpus, self.free_memory
        needs = spec.resources
        fitting = self._fitting(needs, gpus) if needs.gpus else []
        if slots < needs.slots or len(fitting) < needs.gpus:
            return None
        if (needs.cpus and millicpus < needs.millicpus) or (needs.memory and memory < needs.memory):
            return None
        return fitting[: needs.gpus]

    def _offered(self, job: Job) -> tuple[int, list[int], int, int]:
        """Free slots, GPUs, millicpus and memory, less what is held for other jobs."""
        slots, gpus = self.free_slots, self.free_gpus
        millicpus, memory = self.free_millicpus, self.free_memory
        for held_id, held in self.reserved.items():
            if held_id != job.metadata.id:
                slots -= held.slots
                millicpus -= held.millicpus
                memory -= held.memory_bytes
                taken = self._fitting(held, gpus)[: held.gpus]
                gpus = [g for g in gpus if g not in taken]
        return slots, gpus, millicpus, memory

    def fits(self, job: Job) -> bool:
        return self.pick(job) is not None

    def lacks(self, job: Job) -> set[str]:
        """The dimensions `job` is short of here (what is held for others counted as
        taken): `slots`, `gpus`, `cpus`, `memory`."""
        return set(self.shortfall(job))

    def shortfall(self, job: Job) -> dict[str, tuple[int, int]]:
        """What `job` is short of here, by dimension, as (needed, free): `slots`, `gpus`
        (those with its gpu_memory free), `cpus` (thousandths), `memory` (bytes). What
        is held for other nominated jobs counts as taken; eligibility is not looked at."""
        slots, gpus, millicpus, memory = self._offered(job)
        needs = job.spec.resources
        offered = {
            "slots": (needs.slots, slots),
            "gpus": (needs.gpus, len(self._fitting(needs, gpus))),
            "cpus": (needs.millicpus, millicpus),
            "memory": (needs.memory_bytes, memory),
        }
        return {dimension: pair for dimension, pair in offered.items() if pair[1] < pair[0]}

    def _fitting(self, needs: Resources, gpus: list[int]) -> list[int]:
        """The GPUs of `gpus` with room for `needs`, smallest first (best fit: big ones
        stay free for big jobs)."""
        if not needs.gpus:
            return []
        want = needs.gpu_memory or 0
        fitting = [g for g in gpus if not want or self.gpu_memory.get(g, 0) >= want]
        return sorted(fitting, key=lambda g: (self.gpu_memory.get(g, 0), g))

    def take(self, job: Job) -> list[int]:
        gpus = self.pick(job) or []
        self.reserved.pop(job.id, None)
        needs = job.spec.resources
        self.free_slots -= needs.slots
        self.free_millicpus -= needs.millicpus
        self.free_memory -= needs.memory_bytes
        self.free_gpus = [g for g in self.free_gpus if g not in gpus]
        return gpus

    def left_after(self, needs: Resources) -> float:
        """What placing `needs` here leaves of the CPUs and memory it names, as shares of
        the worker's inventory summed: the best fit leaves least (0 when it names none)."""
        left = 0.0
        if needs.cpus:
            left += (self.free_millicpus - needs.millicpus) / max(1, self.total_millicpus)
        if needs.memory:
            left += (self.free_memory - needs.memory) / max(1, self.total_memory)
        return left

    def has_room(self) -> bool:
        """Whether anything at all could start here: a free slot or a free GPU."""
        return self.free_slots > 0 or bool(self.free_gpus)

    def copy(self) -> Capacity:
        return Capacity(
            self.worker,
            self.free_slots,
            list(self.free_gpus),
            self.gpu_memory,
            dict(self.reserved),
            self.free_millicpus,
            self.free_memory,
            self.spec,
            self.rooted,
            self.total_millicpus,
            self.total_memory,
            self.users,
            self._user_set,
            self.address,
        )


def schedulable(workers: Iterable[Worker], heard: Container[str]) -> list[Worker]:
    """The workers new jobs may go to: those heard from since this broker started.

    A worker the store shows Ready but that has not registered or heartbeat to this
    broker may be long dead (the store keeps what the last broker believed); it gets
    one lease to speak (workers.await_known_workers) and nothing new meanwhile.
    """
    return [w for w in workers if w.name in heard]


def capacity_of(workers: Iterable[Worker], bound: Iterable[Job]) -> dict[str, Capacity]:
    """Free slots and GPUs of each Ready worker not cordoned, given the jobs bound to workers.

    A cordoned worker has no room to offer: nothing is bound there, and no preemption
    frees room there for a queued job (`job cordon`, verbs/drain.py); nor has a worker
    whose disk is full (worker_disk.py).
    """
    caps = {
        w.name: _capacity(w)
        for w in workers
        if w.status.phase == WorkerPhase.READY and not w.spec.cordoned and not disk_is_full(w)
    }
    for job in bound:
        if job.status.members:  # a gang: its resources on each member's worker
            for worker, gpus in holdings(job):
                _take_held(caps.get(worker), job, gpus)
        else:
            _take_held(caps.get(job.status.worker or ""), job, job.status.gpus)
    return caps


def holdings(job: Job) -> list[tuple[str, list[int]]]:
    """Each worker a bound job holds room on, with its GPUs there: each member's for a
    gang, else its one worker's."""
    status = job.status
    if status.members:
        return [(m.worker, m.gpus) for m in status.members]
    return [(status.worker, status.gpus)] if status.worker else []


def _take_held(cap: Capacity | None, job: Job, gpus: list[int]) -> None:
    """Count `job` (or one member of a gang) as holding its room and `gpus` on `cap`
    (None: a worker not Ready, nothing to count)."""
    if cap is None:
        return
    needs = job.spec.resources
    cap.free_slots -= needs.slots
    cap.free_millicpus -= needs.millicpus
    cap.free_memory -= needs.memory_bytes
    cap.free_gpus = [g for g in cap.free_gpus if g not in gpus]


def empty_capacity(worker: Worker) -> Capacity:
    """All of one worker's capacity, as if nothing ran there (whatever its phase)."""
    return _capacity(worker)


def _capacity(worker: Worker) -> Capacity:
    """An empty worker's capacity: all of it free."""
    spec = worker.spec
    millicpus, memory = spec.millicpus, spec.memory or 0
    return Capacity(
        worker.name,
        spec.slots,
        sorted(spec.gpus),
        _memory_free(worker),
        {},
        millicpus,
        memory,
        spec,
        bool(spec.mount_roots),
        millicpus,
        memory,
        worker.status.users,
        address=worker.status.address or worker.status.hostname or worker.name,
    )


def _memory_free(worker: Worker) -> dict[int, int]:
    if not worker.spec.gpu_memory:
        return {}  # a CPU worker: asked of every worker in every pass
    foreign = worker.status.gpu_memory_foreign
    return {g: size - foreign.get(g, 0) for g, size in worker.spec.gpu_memory.items()}


def give_back(cap: Capacity, job: Job) -> None:
    """Count what `job` holds on `cap` as free again (a victim, in a trial). A gang gives
    back its member on `cap`'s worker (none: nothing)."""
    gpus = job.status.gpus
    if job.status.members:
        held = [g for worker, g in holdings(job) if worker == cap.worker]
        if not held:
            return
        gpus = held[0]
    needs = job.spec.resources
    cap.free_slots += needs.slots
    cap.free_millicpus += needs.millicpus
    cap.free_memory += needs.memory_bytes
    cap.free_gpus = sorted(set(cap.free_gpus) | set(gpus))


def reserve_nominated(view: ClusterView, caps: dict[str, Capacity]) -> None:
    """Hold the capacity freed by preemption for the queued jobs it was freed for."""
    hold_for(view.nominated.values(), caps)


def hold_for(nominated: Iterable[Job], caps: dict[str, Capacity]) -> None:
    """Hold on each nominated job's worker what it needs (reserve_nominated's rule); on
    each of a nominated gang's workers, what one member needs."""
    for job in nominated:
        if job.status.nominated_workers:
            for worker in job.status.nominated_workers:
                if (held := caps.get(worker)) is not None:
                    held.reserved[job.id] = job.spec.resources
            continue
        cap = caps.get(job.status.nominated_worker or "")
        if cap is not None:
            cap.reserved[job.id] = job.spec.resources


def nominated_on(job: Job) -> list[str]:
    """The workers room is held on for a queued job: a gang's every one, else its one."""
    status = job.status
    if status.nominated_workers:
        return status.nominated_workers
    return [status.nominated_worker] if status.nominated_worker else []


def room_on_its_way(job: Job, caps: dict[str, Capacity]) -> bool:
    """The queued job was nominated and every worker room is held on is still
    schedulable: preemption already frees its room, so nobody need act for it again. A
    gang nominated to a worker that has since gone needs acting for anew."""
    nominated = nominated_on(job)
    return bool(nominated) and all(worker in caps for worker in nominated)


def choose_worker(job: Job, caps: dict[str, Capacity]) -> Capacity | None:
    """The nominated worker if the job has one; else, for a CPU job, the fitting worker
    with most free slots; for a GPU job, the one whose GPUs fit it best (least memory
    given, then most GPUs left), so big GPUs stay free for the jobs that need them. A job
    naming CPUs or memory goes, after its GPUs, where it leaves least of them free (best
    fit: big holes stay for big jobs). The scheduler asks the same of an index by free
    room (rooms.py), which looks at one worker of each kind instead of every worker."""
    if job.status.nominated_worker:
        cap = caps.get(job.status.nominated_worker)
        return cap if cap is not None and cap.fits(job) else None
    return best_of(job, caps.values())


# Where a job goes: one worker's capacity, or a gang's, one worker per member (rank order).
Seat = Capacity | list[Capacity]


def choose_seat(job: Job, caps: dict[str, Capacity]) -> Seat | None:
    """choose_gang for a job of several nodes, else choose_worker."""
    return choose_gang(job, caps) if job.spec.nodes > 1 else choose_worker(job, caps)


def choose_gang(job: Job, caps: dict[str, Capacity]) -> list[Capacity] | None:
    """N distinct workers for a gang of N, each with room for one member: its nominated
    workers when it has them (all must fit), else choose_worker's best fit applied N times,
    each time on the workers not chosen yet. None when N cannot be found: nothing held."""
    nominated = job.status.nominated_workers
    if nominated:
        chosen = [caps.get(name) for name in nominated]
        seats = [c for c in chosen if c is not None and c.fits(job)]
        return seats if len(seats) == job.spec.nodes == len(chosen) else None
    left = dict(caps)
    seats = []
    for _ in range(job.spec.nodes):
        cap = best_of(job, left.values())
        if cap is None:
            return None
        seats.append(cap)
        del left[cap.worker]
    return seats


# What a worker is worth to a job (larger is better): see choose_worker.
PlacementKey = tuple[float, float, int, str]


def best_of(job: Job, caps: Iterable[Capacity], *, admitted: bool = False) -> Capacity | None:
    """The best of `caps` for `job` by choose_worker's measure; `admitted`: each of them
    is known to be eligible (rooms.py judged its kind once), so pick() need not ask."""
    spec = job.spec
    needs = spec.resources
    slots, count, millicpus, memory = needs.slots, needs.gpus, needs.millicpus, needs.memory_bytes
    sized = bool(millicpus or memory)
    owner = job.metadata.owner
    # Whether pick() has more to check than the comparisons below, whatever the worker.
    where = count > 0 or (not admitted and eligibility.asks_where(spec))
    best: tuple[PlacementKey, Capacity] | None = None
    for cap in caps:
        # What is free before reservations bounds what pick() offers: most workers a job
        # does not fit are passed over here, at the cost of four comparisons.
        if cap.free_slots < slots or cap.free_millicpus < millicpus or cap.free_memory < memory:
            continue
        if len(cap.free_gpus) < count:
            continue
        if owner is not None and cap.users is not None and not cap.knows(owner):
            continue  # the owner does not exist there (eligibility.knows_owner)
        if where or cap.reserved or (cap.rooted and not admitted):
            picked = cap.pick(job, admitted=admitted)
            if picked is None:
                continue
            gpus = picked
        else:
            gpus = []  # no GPUs, holds, nor rules: the comparisons above were pick()'s
        snug = -cap.left_after(needs) if sized else 0.0
        if count:
            given = sum(cap.gpu_memory.get(g, 0) for g in gpus)
            key = (float(-given), snug, len(cap.free_gpus), cap.worker)
        else:
            key = (snug, 0.0, cap.free_slots, cap.worker)
        if best is None or key > best[0]:
            best = (key, cap)
    return best[1] if best else None
