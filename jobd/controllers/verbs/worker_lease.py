"""A worker's registration and heartbeat: its lease, and its jobs reconciled both ways.

A worker renews its lease with a heartbeat that lists the jobs it runs. The broker
reconciles in both directions: jobs the worker still runs but the broker had marked Lost
are Running again; jobs it runs that the broker does not bind to it are returned, to be
stopped; jobs the broker thinks it runs but it does not have end (`process_vanished`).
Next stage: lease *expiry* is the workers loop's (controllers/workers.py), a timer on
the worker's key.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from datetime import timedelta

from jobd.api.models import Job, ObjectMeta, Phase, Worker, WorkerPhase, WorkerSpec
from jobd.controllers import transitions, worker_phases
from jobd.controllers.context import Context
from jobd.controllers.scheduler import QUEUE_KEY
from jobd.controllers.verbs import lease_holder
from jobd.controllers.verbs.reports import report_started
from jobd.controllers.worker_disk import note_disk
from jobd.controllers.worker_phases import WorkerVerb
from jobd.store.base import Conflict, EventRecord

__all__ = ["heartbeat", "register_worker"]

_STARTED_PHASES = (Phase.RUNNING, Phase.PREEMPTING, Phase.CANCELLING)
# A job that started a moment ago may be missing from a heartbeat sent just before.
_VANISHED_AFTER = timedelta(seconds=5)


def register_worker(
    ctx: Context,
    name: str,
    spec: WorkerSpec,
    hostname: str,
    runner: str,
    instance: str | None = None,
) -> Worker:
    """Create or refresh a worker; it is Ready with a fresh lease, held by `instance`.

    The worker says what it has (slots, GPUs, lease); whether it is cordoned is the
    users' to say (`job cordon`), so a registration keeps what is stored. Another
    instance than the holder is refused while the holder's lease is live (lease_holder.py);
    each registration taken bumps the fencing epoch.
    """
    live = ctx.store.get_worker(name)
    lease_holder.refuse_other_instance(ctx, live, instance)
    worker = live.model_copy(deep=True) if live else Worker(metadata=ObjectMeta(name=name))
    replaced = live is not None and live.status.instance != instance
    worker.status.instance, worker.status.epoch = instance, worker.status.epoch + 1
    worker.spec = spec.model_copy(update={"cordoned": bool(live and live.spec.cordoned)})
    worker_phases.move(worker, WorkerVerb.REGISTER)
    worker.status.last_renewal = ctx.clock.now()
    worker.status.hostname, worker.status.runner = hostname, runner
    worker.status.gpu_memory_foreign = {}  # the new agent measures anew, if it can
    ctx.leases.heard_from(name, worker.status.last_renewal)
    events = (
        []
        if live and live.status.phase == WorkerPhase.READY and not replaced
        else [
            EventRecord(
                "worker_registered",
                worker=name,
                fields={
                    "slots": spec.slots,
                    "gpus": spec.gpus,
                    "gpu_memory": _memory(spec),
                    "instance": instance,
                    "epoch": worker.status.epoch,
                },
            )
        ]
    )
    return ctx.store.put_worker(worker, events)


def _memory(spec: WorkerSpec) -> list[int]:
    """Each GPU's memory for the event, in the order of `gpus`; 0 where not known."""
    return [spec.gpu_memory.get(g, 0) for g in spec.gpus]


def heartbeat(
    ctx: Context,
    name: str,
    running: list[int],
    attempts: Mapping[int, int] | None = None,
    gpu_memory_foreign: dict[int, int] | None = None,
    disk_full: str | None = None,
    sender: tuple[str | None, int | None] = (None, None),
) -> tuple[Worker, list[int]]:
    """Renew the lease and reconcile both ways; returns the jobs the worker must stop.

    `attempts` gives the run (`status.attempt`) of each running job where the worker says
    it: a run of a job that has since been bound again is an old one, to be stopped.
    The renewal itself is kept in memory; the Worker is written only when its phase or
    its list of jobs changes. The first word from a worker since this broker started
    makes it schedulable (capacity.schedulable): the scheduler is asked to look now.
    `gpu_memory_foreign` (NVML's measure, where the worker has it) is written when it
    changes: placement counts it as taken (capacity.py). `disk_full` (why the worker's disk
    is full, or None) sets its DiskFull condition (worker_disk.py). `sender` (instance,
    epoch) is refused (LeaseHeld) unless it holds the lease.
    """
    live = ctx.view.workers.get(name)
    if live is None:
        raise LookupError(f"worker {name} is not registered")
    lease_holder.check_holder(live, *sender)
    now = ctx.clock.now()
    if ctx.leases.heard_from(name, now):
        ctx.enqueue("scheduler", QUEUE_KEY)
    worker = live.model_copy(deep=True)
    came_back = worker.status.phase == WorkerPhase.LOST
    foreign = worker.status.gpu_memory_foreign if gpu_memory_foreign is None else gpu_memory_foreign
    disk_changed = note_disk(worker, disk_full, now)
    if disk_changed:
        ctx.enqueue("scheduler", QUEUE_KEY)  # room here again, or none: place anew
    if (
        disk_changed
        or came_back
        or worker.status.jobs != sorted(running)
        or worker.status.gpu_memory_foreign != foreign
    ):
        worker_phases.move(worker, WorkerVerb.RENEW)
        worker.status.last_renewal = now
        worker.status.jobs = sorted(running)
        worker.status.gpu_memory_foreign = foreign
        events = [EventRecord("worker_recovered", worker=name)] if came_back else []
        worker = ctx.store.put_worker(worker, events)
    worker.status.last_renewal = now
    return worker, _reconcile_jobs(ctx, name, set(running), attempts or {})


def _reconcile_jobs(
    ctx: Context, name: str, running: set[int], attempts: Mapping[int, int]
) -> list[int]:
    store = ctx.store
    stop: list[int] = []
    for job_id in sorted(running):
        job = ctx.view.bound.get(job_id) or store.get_job(job_id)
        attempt = attempts.get(job_id)
        if job is not None and job.status.worker == name and job.status.phase.terminal:
            stop.append(job_id)  # ended here a moment ago; the worker is still tidying up
        elif job is None or job.status.worker != name:
            stop.append(job_id)
            store.append_events([EventRecord("worker_unknown_job", job=job_id, worker=name)])
        elif attempt is not None and attempt != job.status.attempt:
            stop.append(job_id)  # a superseded run of a job bound here again
            fields = {"attempt": attempt, "current_attempt": job.status.attempt}
            store.append_events(
                [EventRecord("worker_stale_attempt", job=job_id, worker=name, fields=fields)]
            )
        elif job.status.phase == Phase.LOST:
            report_started(ctx, job, name, attempt)  # recovered
    # Lost too: a worker that came back without a job will never report it.
    for job in ctx.view.bound_to(name):
        if job.status.phase not in _STARTED_PHASES and job.status.phase != Phase.LOST:
            continue
        started = job.status.started_at
        if job.id not in running and started and ctx.clock.now() - started > _VANISHED_AFTER:
            _end_vanished(ctx, job)
    return stop


def _end_vanished(ctx: Context, job: Job) -> None:
    ended, events = transitions.process_vanished(job, ctx.clock.now())
    # On Conflict a report raced us; the next heartbeat looks again.
    with contextlib.suppress(Conflict):
        ctx.store.update_job(ended, events)
