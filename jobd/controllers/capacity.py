"""The capacity model: what each Ready worker has free, and what is held for whom.

Pure policy shared by the scheduler (which binds into free room) and the preemption
verbs and sweeper (which free room for a queued job, then hold it for that job, its
`nominated_worker`, so no other job takes it first). Built from the cluster view's
workers and bound jobs; nothing here reads the store.
"""

from __future__ import annotations

from collections.abc import Container, Iterable
from dataclasses import dataclass, field

from jobd.api.models import Job, Resources, Worker
from jobd.controllers.view import ClusterView

__all__ = [
    "Capacity",
    "capacity_of",
    "choose_worker",
    "give_back",
    "reserve_nominated",
    "schedulable",
]


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

    def copy(self) -> Capacity:
        return Capacity(self.worker, self.free_slots, list(self.free_gpus), dict(self.reserved))


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
    frees room there for a queued job (`job cordon`, verbs/drain.py).
    """
    caps = {
        w.name: Capacity(w.name, w.spec.slots, sorted(w.spec.gpus))
        for w in workers
        if w.status.phase == "Ready" and not w.spec.cordoned
    }
    for job in bound:
        cap = caps.get(job.status.worker or "")
        if cap is not None:
            cap.free_slots -= job.spec.resources.slots
            cap.free_gpus = [g for g in cap.free_gpus if g not in job.status.gpus]
    return caps


def give_back(cap: Capacity, job: Job) -> None:
    """Count `job`'s slots and GPUs on `cap` as free again (a victim, in a trial)."""
    cap.free_slots += job.spec.resources.slots
    cap.free_gpus = sorted(set(cap.free_gpus) | set(job.status.gpus))


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
