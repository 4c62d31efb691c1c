"""`job cordon`, `job uncordon` and `job drain`: emptying a worker by hand.

Cordoning sets the Worker's `spec.cordoned` (Kubernetes' `spec.unschedulable`): the
capacity model (capacity.py) then counts no room there, so the scheduler places nothing
new on it and neither the sweeper nor `preempt-blockers` frees room there for a queued
job. What runs there goes on. Capacity held on it for a queued job is released, so that
job is placed elsewhere. The flag is part of the stored resource, so it outlives the
worker's re-registration and a broker restart.

Draining is cordoning plus, when asked, preempting the worker's preemptible Running
jobs with their grace (`auto_preempt`, reason `drain`); jobs that are not preemptible
are left to end on their own, as Slurm's DRAIN state does. The verb answers what is
still bound; `job drain` asks again until nothing is. Next stage: the worker stops the
preempted jobs, and the scheduler binds what they leave to other workers.
"""

from __future__ import annotations

from dataclasses import dataclass

from jobd.api.models import Job, Phase, Worker
from jobd.controllers import transitions
from jobd.controllers.capacity import nominated_on
from jobd.controllers.context import Context
from jobd.controllers.verbs.preempt import request_preemption
from jobd.controllers.victims import on_the_way
from jobd.store.base import Conflict, EventRecord, NotFound

__all__ = ["Drain", "bound_jobs", "cordon", "drain", "worker_or_404"]

_ATTEMPTS = 3


@dataclass
class Drain:
    """Where a drain stands: the worker, what it preempted now, and what is still bound."""

    worker: Worker
    preempted: list[Job]
    remaining: list[Job]


def worker_or_404(ctx: Context, name: str) -> Worker:
    worker = ctx.store.get_worker(name)
    if worker is None:
        raise NotFound(f"worker {name} is not registered")
    return worker


def bound_jobs(ctx: Context, name: str) -> list[Job]:
    """The jobs bound to the worker (Scheduled, Running, stopping or Lost), by id."""
    return ctx.view.bound_to(name)


def cordon(ctx: Context, name: str, cordoned: bool = True) -> Worker:
    """Set or clear the worker's cordon; a no-op (no write, no event) when already so."""
    for attempt in range(_ATTEMPTS):
        try:
            worker = _set_cordon(ctx, name, cordoned)
            break
        except Conflict:
            # A heartbeat or re-registration wrote the worker meanwhile: read it again.
            if attempt == _ATTEMPTS - 1:
                raise
    if cordoned:
        _release_nominations(ctx, name)  # also when asked again after a conflict here
    return worker


def _set_cordon(ctx: Context, name: str, cordoned: bool) -> Worker:
    worker = worker_or_404(ctx, name)
    if worker.spec.cordoned == cordoned:
        return worker
    changed = worker.model_copy(deep=True)
    changed.spec.cordoned = cordoned
    event = "worker_cordoned" if cordoned else "worker_uncordoned"
    fields = {"jobs": [j.id for j in bound_jobs(ctx, name)]} if cordoned else {}
    return ctx.store.put_worker(changed, [EventRecord(event, worker=name, fields=fields)])


def drain(ctx: Context, name: str, preempt: bool) -> Drain:
    """Cordon the worker; with `preempt`, preempt its preemptible Running jobs.

    Asked again (as `job drain` does while it waits), it preempts what has started
    since and not what is already on its way out.
    """
    worker = cordon(ctx, name)
    preempted = []
    if preempt:
        for job in bound_jobs(ctx, name):
            if _preemptible_now(job):
                preempted.append(request_preemption(ctx, job, "drain"))
    return Drain(worker, preempted, bound_jobs(ctx, name))


def _preemptible_now(job: Job) -> bool:
    return (
        job.status.phase == Phase.RUNNING
        and job.status.effective.preemptible
        and not on_the_way(job)
    )


def _release_nominations(ctx: Context, name: str) -> None:
    """Queued jobs waiting for room on a cordoned worker would wait for ever: free them."""
    for job in list(ctx.view.nominated.values()):
        if name in nominated_on(job):  # a gang held room on it among others
            ctx.store.update_job(*transitions.release_nomination(job))
