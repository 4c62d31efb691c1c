"""Workers: registration, lease renewal, and what happens when a lease expires.

A worker renews its lease with a heartbeat that lists the jobs it runs. The reconcile
goes both ways: jobs the worker still runs but the broker had marked Lost are Running
again; jobs it runs that the broker does not bind to it are reported and told to stop;
jobs the broker thinks it runs but it does not have are Failed. Lease expiry is a
`requeue_after` timer on the worker's key, never a polling loop.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from datetime import datetime, timedelta

from jobd.api.models import BOUND_PHASES, Job, ObjectMeta, Phase, Worker, WorkerSpec
from jobd.controllers.context import Context
from jobd.controllers.lifecycle import finish, report_started
from jobd.controllers.queueing import DONE, Result
from jobd.store.base import Change, Conflict, EventRecord, Store

__all__ = ["WorkersController", "heartbeat", "last_renewal", "register_worker"]

_STARTED_PHASES = (Phase.RUNNING, Phase.PREEMPTING, Phase.CANCELLING)


def register_worker(
    store: Store, name: str, spec: WorkerSpec, hostname: str, runner: str, ctx: Context
) -> Worker:
    """Create or refresh a worker; it is Ready with a fresh lease."""
    live = store.get_worker(name)
    worker = live.model_copy(deep=True) if live else Worker(metadata=ObjectMeta(name=name))
    worker.spec = spec
    worker.status.phase = "Ready"
    worker.status.last_renewal = ctx.clock.now()
    worker.status.hostname, worker.status.runner = hostname, runner
    ctx.leases[name] = worker.status.last_renewal
    events = (
        []
        if live and live.status.phase == "Ready"
        else [
            EventRecord(
                "worker_registered", worker=name, fields={"slots": spec.slots, "gpus": spec.gpus}
            )
        ]
    )
    return store.put_worker(worker, events)


def heartbeat(
    store: Store, name: str, running: list[int], ctx: Context
) -> tuple[Worker, list[int]]:
    """Renew the lease and reconcile both ways; returns the jobs the worker must stop.

    The renewal itself is kept in memory; the Worker is written only when its phase or
    its list of jobs changes.
    """
    live = ctx.view.workers.get(name)
    if live is None:
        raise LookupError(f"worker {name} is not registered")
    now = ctx.clock.now()
    ctx.leases[name] = now
    worker = live.model_copy(deep=True)
    came_back = worker.status.phase == "Lost"
    if came_back or worker.status.jobs != sorted(running):
        worker.status.phase = "Ready"
        worker.status.last_renewal = now
        worker.status.jobs = sorted(running)
        events = [EventRecord("worker_recovered", worker=name)] if came_back else []
        worker = store.put_worker(worker, events)
    worker.status.last_renewal = now
    return worker, _reconcile_jobs(store, name, set(running), ctx)


def last_renewal(ctx: Context, worker: Worker) -> datetime:
    """The newest renewal known: in memory since this broker started, else the stored one."""
    remembered = ctx.leases.get(worker.name)
    stored = worker.status.last_renewal
    return max(remembered, stored) if remembered else stored


def _reconcile_jobs(store: Store, name: str, running: set[int], ctx: Context) -> list[int]:
    stop: list[int] = []
    for job_id in sorted(running):
        job = ctx.view.bound.get(job_id) or store.get_job(job_id)
        if job is not None and job.status.worker == name and job.status.phase.terminal:
            stop.append(job_id)  # ended here a moment ago; the worker is still tidying up
        elif job is None or job.status.worker != name:
            stop.append(job_id)
            store.append_events([EventRecord("worker_unknown_job", job=job_id, worker=name)])
        elif job.status.phase == Phase.LOST:
            report_started(store, job, name, ctx)
    grace = timedelta(seconds=5)
    # Lost too: a worker that came back without a job will never report it.
    for job in ctx.view.bound_to(name):
        if job.status.phase not in _STARTED_PHASES and job.status.phase != Phase.LOST:
            continue
        started = job.status.started_at
        if job.id not in running and started and ctx.clock.now() - started > grace:
            _fail_vanished(store, job, ctx)
    return stop


def _fail_vanished(store: Store, job: Job, ctx: Context) -> None:
    job = job.evolve()
    job.status.message = f"worker {job.status.worker} no longer runs it"
    desired = job.status.desired_phase
    phase = desired if desired in (Phase.PREEMPTED, Phase.CANCELLED) else Phase.FAILED
    # On Conflict a report raced us; the next heartbeat looks again.
    with contextlib.suppress(Conflict):
        store.update_job(job, finish(job, phase, ctx, "process_vanished"))


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
        if worker.status.phase == "Ready":
            age = (self.ctx.clock.now() - last_renewal(self.ctx, worker)).total_seconds()
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
        if worker.status.phase != "Lost":
            lost = worker.model_copy(deep=True)
            lost.status.phase = "Lost"
            store.put_worker(lost, [EventRecord("worker_lost", worker=worker.name)])
        for job in store.list_jobs(worker=worker.name, phases=BOUND_PHASES):
            if job.status.phase == Phase.LOST:
                continue
            job = job.evolve()
            if job.status.phase == Phase.SCHEDULED:
                # Never started: give it back to the queue rather than wait for the worker.
                job.status.phase, job.status.worker, job.status.gpus = Phase.PENDING, None, []
                store.update_job(job, [EventRecord("job_unbound", job=job.id, worker=worker.name)])
                continue
            job.status.phase, job.status.lost_at = Phase.LOST, now
            store.update_job(job, [EventRecord("job_lost", job=job.id, worker=worker.name)])
        for job in store.list_jobs(nominated=True):
            if job.status.nominated_worker == worker.name and job.status.phase == Phase.PENDING:
                job = job.evolve()
                job.status.nominated_worker = None
                store.update_job(job)
