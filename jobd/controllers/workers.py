"""Workers: the lease-expiry loop, leaving a silent worker's jobs Lost or queued again.

A worker's lease is renewed by its heartbeat (verbs/worker_lease.py), in memory. This loop,
keyed by worker name, sleeps until the lease would run out (`requeue_after`, never a
polling loop); if no renewal came within a lease of time the broker observed
(observed.py), the worker is Lost, its Scheduled jobs go back to
the queue (`unbind`), its started jobs are Lost (`lose`), and capacity held for a queued
job on it is released. Next stage: the lifecycle loop ends jobs Lost too long; a
worker that comes back recovers them with its next heartbeat.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta

from jobd.api.models import BOUND_PHASES, Phase, Worker, WorkerPhase
from jobd.controllers import transitions, worker_phases
from jobd.controllers.capacity import nominated_on
from jobd.controllers.context import Context
from jobd.controllers.queueing import DONE, Result
from jobd.controllers.worker_phases import WorkerVerb
from jobd.store.base import Change, Conflict, EventRecord

__all__ = ["WorkersController", "await_known_workers", "last_renewal"]


def await_known_workers(ctx: Context) -> list[str]:
    """At broker start: give every worker the store shows Ready one lease to speak, and say so.

    Nothing is bound to them meanwhile (capacity.schedulable); one that registers or
    heartbeats is schedulable at once, one that stays silent is Lost when the lease is
    out (this loop). One `worker_awaited` event per worker names the deadline.
    """
    now, events = ctx.clock.now(), []
    for worker in ctx.store.list_workers():
        if worker.status.phase != WorkerPhase.READY or worker.name in ctx.leases.heard:
            continue
        ctx.leases[worker.name] = now  # a full lease from now, whatever the store says
        deadline = now + timedelta(seconds=worker.spec.lease_duration_s)
        fields = {"deadline": _rfc3339(deadline), "lease_s": worker.spec.lease_duration_s}
        events.append(EventRecord("worker_awaited", worker=worker.name, fields=fields))
    if events:
        ctx.store.append_events(events)
    return [e.worker or "" for e in events]


def _rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def last_renewal(ctx: Context, worker: Worker) -> datetime:
    """The newest renewal known: in memory since this broker started, else the stored one."""
    remembered = ctx.leases.get(worker.name)
    stored = worker.status.last_renewal
    return max(remembered, stored) if remembered else stored


class WorkersController:
    """Per-worker key: expire leases, leaving bound jobs Lost."""

    name = "workers"

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.resync_s = ctx.settings.sweep_interval_s
        # A broker that just started has heard no heartbeat yet: every worker gets one
        # full lease from now before it can be called Lost.
        for worker in ctx.store.list_workers():
            ctx.leases.setdefault(worker.name, ctx.clock.now())

    def keys_for(self, change: Change) -> Iterable[str]:
        return [change.key] if change.kind == "Worker" and change.op != "DELETED" else []

    def keys_all(self) -> Iterable[str]:
        return [w.name for w in self.ctx.store.list_workers()]

    async def reconcile(self, key: str) -> Result:
        worker = self.ctx.store.get_worker(key)
        if worker is None:
            return DONE
        if worker.status.phase == WorkerPhase.READY:
            age = self.ctx.observed.elapsed_since(last_renewal(self.ctx, worker))
            remaining = worker.spec.lease_duration_s - age
            if remaining > 0:
                return Result(requeue_after=remaining)
        # A Lost worker is looked at again too: an expiry cut short by a conflict must
        # still leave every one of its jobs Lost (each step below is idempotent).
        try:
            self._expire(worker)
        except Conflict:
            return Result(requeue_after=0)
        return DONE

    def _expire(self, worker: Worker) -> None:
        store, now = self.ctx.store, self.ctx.clock.now()
        lost = worker.model_copy(deep=True)
        if worker_phases.move(lost, WorkerVerb.EXPIRE):
            store.put_worker(lost, [EventRecord("worker_lost", worker=worker.name)])
        for job in store.list_jobs(worker=worker.name, phases=BOUND_PHASES):
            if job.status.phase == Phase.SCHEDULED:
                # Never started: give it back to the queue rather than wait for the worker.
                store.update_job(*transitions.unbind(job, now))
            elif job.status.phase != Phase.LOST:
                store.update_job(*transitions.lose(job, now))
        for job in store.list_jobs(nominated=True):
            if worker.name in nominated_on(job) and job.status.phase == Phase.PENDING:
                store.update_job(*transitions.release_nomination(job))
