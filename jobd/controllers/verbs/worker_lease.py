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
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from jobd.api.models import Job, ObjectMeta, Phase, Worker, WorkerPhase, WorkerSpec
from jobd.controllers import gangs, transitions, worker_phases
from jobd.controllers.context import Context
from jobd.controllers.scheduler import QUEUE_KEY
from jobd.controllers.verbs import lease_holder
from jobd.controllers.verbs.reports import report_started
from jobd.controllers.worker_disk import DISK_FULL, note_disk
from jobd.controllers.worker_phases import WorkerVerb
from jobd.store.base import Conflict, EventRecord

__all__ = ["Renewal", "heartbeat", "register_worker", "renew", "settle"]

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
    owners: tuple[str | None, list[str] | None] = (None, None),
    address: str | None = None,
) -> Worker:
    """Create or refresh a worker; it is Ready with a fresh lease, held by `instance`.

    The worker says what it has (slots, GPUs, lease); whether it is cordoned is the
    users' to say (`job cordon`), so a registration keeps what is stored. Another
    instance than the holder is refused while the holder's lease is live (lease_holder.py);
    each registration taken bumps the fencing epoch. `owners`: whom it runs jobs as, and
    the owners placeable there (None: any). `address`: where multi-host jobs reach it
    (its agent's choice: kept until the next registration, heartbeats carry none).
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
    worker.status.runs_as, worker.status.users = owners
    worker.status.address = address
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


@dataclass
class Renewal:
    """A heartbeat as the loop's memory judged it, and the store work it still needs.

    `renew` makes it on the event loop (the lease table, the view, the scheduler's
    queue are the loop's); `settle` does its store work, inline or on the store's thread
    (store/runner.py), with the copies it holds.
    """

    name: str
    now: datetime
    running: list[int]
    attempts: Mapping[int, int]
    foreign: dict[int, int] | None
    disk_full: str | None
    worker: Worker  # what to answer with, and to write when `changed`
    changed: bool
    events: list[EventRecord]
    bound: list[Job]  # the view's jobs bound to the worker, read on the loop
    users: list[str] | None = None  # the owners placeable there, when they changed

    @property
    def needs_store(self) -> bool:
        """Whether settling it reads or writes the store; most heartbeats do neither."""
        return self.changed or not _quiet(self)


def heartbeat(
    ctx: Context,
    name: str,
    running: list[int],
    attempts: Mapping[int, int] | None = None,
    gpu_memory_foreign: dict[int, int] | None = None,
    disk_full: str | None = None,
    sender: tuple[str | None, int | None] = (None, None),
    users: list[str] | None = None,
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
    epoch) is refused (LeaseHeld) unless it holds the lease. `users` (the owners whose
    jobs may run there, when they changed; None: unchanged) is written when it differs.

    Inline, in one go; the broker off the loop calls `renew` and `settle` apart.
    """
    renewal = renew(ctx, name, running, attempts, gpu_memory_foreign, disk_full, sender, users)
    return settle(ctx, renewal)


def renew(
    ctx: Context,
    name: str,
    running: list[int],
    attempts: Mapping[int, int] | None = None,
    gpu_memory_foreign: dict[int, int] | None = None,
    disk_full: str | None = None,
    sender: tuple[str | None, int | None] = (None, None),
    users: list[str] | None = None,
) -> Renewal:
    """The loop's part of a heartbeat: the sender, the lease, and what is to be written."""
    live = ctx.view.workers.get(name)
    if live is None:
        raise LookupError(f"worker {name} is not registered")
    lease_holder.check_holder(live, *sender)
    now = ctx.clock.now()
    if ctx.leases.heard_from(name, now):
        ctx.enqueue("scheduler", QUEUE_KEY)
    worker, changed, disk_changed = _renewed(
        live, running, gpu_memory_foreign, disk_full, now, users
    )
    if users is not None and users != live.status.users:
        ctx.enqueue("scheduler", QUEUE_KEY)  # an owner new here may now be placed here
    if disk_changed:
        ctx.enqueue("scheduler", QUEUE_KEY)  # room here again, or none: place anew
    came_back = live.status.phase == WorkerPhase.LOST
    events = [EventRecord("worker_recovered", worker=name)] if came_back else []
    return Renewal(
        name,
        now,
        sorted(running),
        dict(attempts or {}),
        gpu_memory_foreign,
        disk_full,
        worker,
        changed,
        events,
        ctx.view.bound_to(name),
        users,
    )


def _renewed(
    live: Worker,
    running: list[int],
    gpu_memory_foreign: dict[int, int] | None,
    disk_full: str | None,
    now: datetime,
    users: list[str] | None = None,
) -> tuple[Worker, bool, bool]:
    """The worker as the heartbeat leaves it; whether to write it; whether its disk changed.

    Most heartbeats bring nothing but the time: the answer is then a shallow copy with
    the renewal's time (the view's worker is never changed in place), not a deep one.
    """
    was = live.status
    foreign = was.gpu_memory_foreign if gpu_memory_foreign is None else gpu_memory_foreign
    if (
        disk_full is None
        and not any(c.type == DISK_FULL for c in was.conditions)
        and was.phase != WorkerPhase.LOST
        and was.jobs == sorted(running)
        and was.gpu_memory_foreign == foreign
        and (users is None or users == was.users)
    ):
        status = was.model_copy(update={"last_renewal": now})
        return live.model_copy(update={"status": status}), False, False
    worker = live.model_copy(deep=True)
    came_back = worker.status.phase == WorkerPhase.LOST
    disk_changed = note_disk(worker, disk_full, now)
    changed = (
        disk_changed
        or came_back
        or worker.status.jobs != sorted(running)
        or worker.status.gpu_memory_foreign != foreign
        or (users is not None and users != worker.status.users)
    )
    if changed:
        worker_phases.move(worker, WorkerVerb.RENEW)
        worker.status.jobs = sorted(running)
        worker.status.gpu_memory_foreign = foreign
        if users is not None:
            worker.status.users = users
    worker.status.last_renewal = now
    return worker, changed, disk_changed


def settle(ctx: Context, renewal: Renewal) -> tuple[Worker, list[int]]:
    """The store's part of a heartbeat: write the worker if it changed, reconcile its jobs.

    Off the loop another write of the worker (a cordon) may have landed since the loop
    judged it: the heartbeat is then applied again to what is stored.
    """
    worker = renewal.worker
    if renewal.changed:
        try:
            worker = ctx.store.put_worker(worker, renewal.events)
        except Conflict:
            worker = _put_again(ctx, renewal)
        worker.status.last_renewal = renewal.now
    running = set(renewal.running)
    stop = _reconcile_jobs(ctx, renewal.name, running, renewal.attempts, renewal.bound)
    return worker, stop


def _put_again(ctx: Context, renewal: Renewal) -> Worker:
    stored = ctx.store.get_worker(renewal.name)
    if stored is None:
        raise LookupError(f"worker {renewal.name} is not registered")
    worker, changed, _ = _renewed(
        stored, renewal.running, renewal.foreign, renewal.disk_full, renewal.now, renewal.users
    )
    return ctx.store.put_worker(worker, renewal.events) if changed else worker


def _quiet(renewal: Renewal) -> bool:
    """Whether the jobs reconcile with nothing to read or write: each job the worker runs
    is bound to it in the view, in this run and not Lost, and no bound job is missing
    from the list long enough to have vanished (what `_reconcile_jobs` would find)."""
    bound = {job.id: job for job in renewal.bound}
    for job_id in renewal.running:
        job = bound.get(job_id)
        if job is None or job.status.phase.terminal or job.status.phase == Phase.LOST:
            return False
        attempt = renewal.attempts.get(job_id)
        if attempt is not None and attempt != job.status.attempt:
            return False
    bound_here = renewal.bound
    return not any(_vanished(job, renewal.running, renewal.now, renewal.name) for job in bound_here)


def _vanished(job: Job, running: Collection[int], now: datetime, worker: str) -> bool:
    """A job started here that the worker no longer lists, past the grace of a moment (a
    gang's member here, not yet ended: the others may run on after it ended)."""
    if job.status.phase not in _STARTED_PHASES and job.status.phase != Phase.LOST:
        return False
    started = job.status.started_at
    if job.id in running or started is None or now - started <= _VANISHED_AFTER:
        return False
    rank = gangs.rank_of(job, worker) if job.status.members else 0
    return rank is not None and _member_runs(job, rank)


def _member_runs(job: Job, rank: int) -> bool:
    """Whether member `rank` of `job` has started and not ended (a job of one node: yes)."""
    members = job.status.members
    return not members or members[rank].phase == Phase.RUNNING


def _reconcile_jobs(
    ctx: Context, name: str, running: set[int], attempts: Mapping[int, int], bound: list[Job]
) -> list[int]:
    store = ctx.store
    stop: list[int] = []
    for job_id in sorted(running):
        job = ctx.view.bound.get(job_id) or store.get_job(job_id)
        attempt = attempts.get(job_id)
        here = job is not None and (job.status.worker == name or gangs.runs_on(job, name))
        if job is not None and here and job.status.phase.terminal:
            stop.append(job_id)  # ended here a moment ago; the worker is still tidying up
        elif job is None or not here:
            stop.append(job_id)
            store.append_events([EventRecord("worker_unknown_job", job=job_id, worker=name)])
        elif attempt is not None and attempt != job.status.attempt:
            stop.append(job_id)  # a superseded run of a job bound here again
            fields = {"attempt": attempt, "current_attempt": job.status.attempt}
            store.append_events(
                [EventRecord("worker_stale_attempt", job=job_id, worker=name, fields=fields)]
            )
        elif job.status.phase == Phase.LOST and _members_back(ctx, job, name):
            report_started(ctx, job, name, attempt, gangs.rank_of(job, name) or 0)  # recovered
    # Lost too: a worker that came back without a job will never report it.
    now = ctx.clock.now()
    for job in bound:
        if _vanished(job, running, now, name):
            _end_vanished(ctx, job)
    return stop


def _members_back(ctx: Context, job: Job, name: str) -> bool:
    """Whether a Lost job's workers are all back (`name` is heard from now): a gang runs
    again only when none of its members' workers is still Lost."""
    for worker in gangs.member_workers(job):
        known = ctx.view.workers.get(worker)
        if worker != name and (known is None or known.status.phase == WorkerPhase.LOST):
            return False
    return True


def _end_vanished(ctx: Context, job: Job) -> None:
    ended, events = transitions.process_vanished(job, ctx.clock.now())
    # On Conflict a report raced us; the next heartbeat looks again.
    with contextlib.suppress(Conflict):
        ctx.store.update_job(ended, events)
