"""The scheduler: binds pending jobs to workers with free slots (and free GPUs).

One key, "queue": each pass reads the workers and the jobs bound to them (work that
grows with what runs, not with history), then walks ready Pending jobs highest priority
first, FIFO within a priority, off an index, stopping as soon as no capacity is left.
Capacity freed by preemption is held for the job it was freed for (its
`nominated_worker`): no other job may take it first. Next stage: the worker sees the
binding through its watch and starts the process.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from jobd.api.models import BOUND_PHASES, Job, Phase, Resources, Worker, set_condition
from jobd.controllers.context import Context
from jobd.controllers.queueing import DONE, Result
from jobd.controllers.view import ClusterView
from jobd.store.base import Change, Conflict, EventRecord

__all__ = [
    "Capacity",
    "SchedulerController",
    "capacity_of",
    "choose_worker",
    "reserve_nominated",
]

QUEUE_KEY = "queue"
# How many queued jobs one pass may look at beyond those it binds (like Slurm's
# bf_max_job_test): a queue of jobs that fit nowhere must not make every pass long.
_SCAN_LIMIT = 128


@dataclass
class Capacity:
    """What one worker has left, with the reservations made for nominated jobs."""

    worker: str
    free_slots: int
    free_gpus: list[int]
    # job id -> what is held for it: its slots *and* its GPUs, or a GPU freed for a
    # nominated job could go to another job that finds a spare slot.
    reserved: dict[int, Resources] = field(default_factory=dict)

    def fits(self, job: Job) -> bool:
        held = [r for j, r in self.reserved.items() if j != job.metadata.id]
        needs = job.spec.resources
        free_slots = self.free_slots - sum(r.slots for r in held)
        free_gpus = len(self.free_gpus) - sum(r.gpus for r in held)
        return free_slots >= needs.slots and free_gpus >= needs.gpus

    def take(self, job: Job) -> list[int]:
        self.reserved.pop(job.id, None)
        self.free_slots -= job.spec.resources.slots
        gpus, self.free_gpus = (
            self.free_gpus[: job.spec.resources.gpus],
            self.free_gpus[job.spec.resources.gpus :],
        )
        return gpus


def capacity_of(workers: Iterable[Worker], bound: Iterable[Job]) -> dict[str, Capacity]:
    """Free slots and GPUs of each Ready worker, given the jobs bound to workers."""
    caps = {
        w.name: Capacity(w.name, w.spec.slots, sorted(w.spec.gpus))
        for w in workers
        if w.status.phase == "Ready"
    }
    for job in bound:
        cap = caps.get(job.status.worker or "")
        if cap is not None:
            cap.free_slots -= job.spec.resources.slots
            cap.free_gpus = [g for g in cap.free_gpus if g not in job.status.gpus]
    return caps


def reserve_nominated(view: ClusterView, caps: dict[str, Capacity]) -> None:
    """Hold the capacity freed by preemption for the queued jobs it was freed for."""
    for job in view.nominated.values():
        cap = caps.get(job.status.nominated_worker or "")
        if cap is not None:
            cap.reserved[job.id] = job.spec.resources


def choose_worker(job: Job, caps: dict[str, Capacity]) -> Capacity | None:
    """The nominated worker if the job has one; else the fitting worker with most room."""
    if job.status.nominated_worker:
        cap = caps.get(job.status.nominated_worker)
        return cap if cap is not None and cap.fits(job) else None
    fitting = [c for c in caps.values() if c.fits(job)]
    return max(fitting, key=lambda c: (c.free_slots, c.worker), default=None)


class SchedulerController:
    name = "scheduler"
    # Under load, the changes of a couple of milliseconds make one pass, not one each.
    coalesce_s = 0.002

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.resync_s = ctx.settings.sweep_interval_s

    def keys_for(self, change: Change) -> Iterable[str]:
        if change.kind == "Worker":
            return [QUEUE_KEY]
        job = change.job
        if job is None:
            return []
        status = job.status
        # A new ready job, or a job that gave its slot back, may let something run.
        if status.phase == Phase.PENDING and status.dependencies_met:
            return [QUEUE_KEY]
        if status.phase not in _BOUND or change.op == "DELETED":
            return [QUEUE_KEY] if status.worker else []
        return []

    def keys_all(self) -> Iterable[str]:
        return [QUEUE_KEY]

    async def reconcile(self, key: str) -> Result:
        store = self.ctx.store
        view = self.ctx.view
        caps = capacity_of(view.workers.values(), view.bound.values())
        # Most passes under load end here, on memory alone: no room anywhere.
        if not any(c.free_slots > 0 for c in caps.values()):
            return DONE
        reserve_nominated(view, caps)
        after: tuple[int, int] | None = None
        scanned = 0
        while scanned < _SCAN_LIMIT and (free := sum(max(0, c.free_slots) for c in caps.values())):
            # Read about as many queued jobs as could start: a pass costs what it binds.
            # (Twice that; a page whose jobs all go unbound is followed by the next one.
            # A floor of 8 parsed six bodies more than a one-slot pass binds.)
            size = min(_SCAN_LIMIT - scanned, 2 * free)
            # Jobs too big for every worker's free room stay in the index, unread.
            fits = (
                max(c.free_slots for c in caps.values()),
                max(len(c.free_gpus) for c in caps.values()),
            )
            page = store.queue_head(size, fits, after)
            for job in page:
                cap = choose_worker(job, caps)
                if cap is not None:
                    self._bind(job, cap)
            scanned += len(page)
            if len(page) < size:
                break
            after = (page[-1].status.effective.priority, page[-1].id)
        return DONE

    def _bind(self, job: Job, cap: Capacity) -> None:
        bound = job.evolve()
        status = bound.status
        status.phase, status.worker = Phase.SCHEDULED, cap.worker
        status.scheduled_at = self.ctx.clock.now()
        if status.nominated_worker is not None:
            set_condition(status, "Nominated", False, "Bound", "the held capacity was taken")
        status.nominated_worker = None
        status.gpus = cap.take(job)
        set_condition(status, "Scheduled", True, "Bound", f"bound to {cap.worker}")
        event = EventRecord(
            "job_scheduled", job=job.id, worker=cap.worker, fields={"gpus": status.gpus}
        )
        try:
            self.ctx.store.update_job(bound, [event])
        except Conflict:
            self.ctx.enqueue(self.name, QUEUE_KEY)  # it changed; the next pass sees why


_BOUND = {p.value for p in BOUND_PHASES}
