"""Placement: a queued job that no registered worker could ever run is said to be so.

The scheduler (scheduler.py) reads only the jobs that fit some worker's *free* room, so a
job asking for more GPUs (or GPU memory, CPUs, memory) than any worker *has*, or that no
worker admits (its pin, selector or affinity; its cwd under none of a worker's mount
roots: eligibility.py), would wait in silence. This loop compares each queued job with the
workers' whole capacity (every registered worker, cordoned or Lost alike: each may run
jobs again) and sets the condition `Scheduled=False, reason=Unschedulable` with a message
naming the largest eligible worker ("no worker has 5 GPUs; the largest has 4", "no worker
has 16 CPUs; the largest has 8 CPUs") or what kept each worker out ("no worker may run it
(a: label site=lab1, not lab3; ...)"), with one `job_unschedulable` event. The
job keeps waiting, since a worker may join; once one could run it the condition goes.
With no worker registered at all, nothing is said: a worker is usually on its way.
A job created through `job submit` is judged at admission already (verbs/admission.py),
so the answer to the create carries the condition; this loop judges the rest.

Cheap on the scheduler's hot path: the capacities are kept here from the workers'
committed changes, and a job's change queues its key only when its verdict differs from
what its condition says. A change of capacities looks at every queued job once (key `*`).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import NamedTuple

from jobd.api.models import Job, JobSpec, Phase, Resources, Worker
from jobd.api.sizes import format_size
from jobd.api.wait_reasons import WaitReason
from jobd.controllers import eligibility, transitions
from jobd.controllers.context import Context
from jobd.controllers.queueing import DONE, Result
from jobd.store.base import Change, Conflict

__all__ = [
    "EVERY_QUEUED_JOB",
    "UNSCHEDULABLE",
    "PlacementController",
    "Shape",
    "placement_message",
    "shapes_of",
    "unschedulable_message",
]

EVERY_QUEUED_JOB = "*"
UNSCHEDULABLE = WaitReason.UNSCHEDULABLE.value
# How many workers a message names, each with what keeps the job from it.
_NAMED = 4


class Shape(NamedTuple):
    """What a verdict needs to know of one worker: its whole capacity and its rules."""

    slots: int
    gpu_memory: tuple[int, ...]  # each GPU's memory in bytes, largest first (0: not known)
    millicpus: int = 0
    memory: int = 0
    name: str = ""
    labels: tuple[tuple[str, str], ...] = ()
    mount_roots: tuple[str, ...] = ()
    users: frozenset[str] | None = None  # the owners it takes (None: any)


def shapes_of(workers: Iterable[Worker]) -> set[Shape]:
    """The distinct shapes of these workers: all a verdict needs to know of them."""
    return {_shape(w) for w in workers}


def placement_message(
    spec: JobSpec, shapes: Collection[Shape], rooted: bool | None = None, owner: str | None = None
) -> str | None:
    """Why no worker of these shapes could ever run a job of `spec`; None if one could.

    First the workers it may run on at all (its pin, selector, affinity; its cwd under
    a worker's mount roots: eligibility.py); then, among those, one whose whole capacity
    holds every dimension it asks for at once. `rooted`: whether some shape names mount
    roots (the controller keeps it; else it is worked out here). `owner`: the job's, which
    must exist on a worker's host (eligibility.knows_owner) before anything else counts.
    """
    if not shapes:
        return None
    if owner is not None:
        strangers = [s for s in shapes if not eligibility.knows_owner(owner, s.users)]
        if len(strangers) == len(shapes):
            refusals = [f"{s.name}: {eligibility.owner_refusal(owner, s.users)}" for s in shapes]
            return _no_worker_may(spec, sorted(refusals))
        if strangers:
            shapes = [s for s in shapes if s not in strangers]
    needs = spec.resources
    if rooted is None:
        rooted = any(s.mount_roots for s in shapes)
    # Every create and every change of a queued job asks: a job naming none of it is
    # answered on the fields themselves (cpus and memory are None or above zero).
    gang = spec.nodes > 1
    if not (
        needs.gpus or needs.cpus or needs.memory or rooted or gang or eligibility.asks_where(spec)
    ):
        return None
    welcome = [s for s in shapes if _admits(spec, s)]
    if not welcome:
        refusals = [
            f"{s.name}: {eligibility.why_not(spec, s.name, dict(s.labels), s.mount_roots)}"
            for s in shapes
        ]
        return _no_worker_may(spec, sorted(refusals))
    if gang:
        return _too_few(spec, welcome)
    if any(_holds(shape, needs) for shape in welcome):
        return None
    return unschedulable_message(needs, welcome) or _too_big(needs, welcome)


def _too_few(spec: JobSpec, welcome: Collection[Shape]) -> str | None:
    """Why fewer than `spec.nodes` workers (of these, each a worker) could ever hold one
    member of a gang each; None when enough could."""
    holding = sum(1 for shape in welcome if _holds(shape, spec.resources))
    if holding >= spec.nodes:
        return None
    if not holding:
        return unschedulable_message(spec.resources, welcome) or _too_big(spec.resources, welcome)
    can = "1 can" if holding == 1 else f"{holding} can"
    return f"needs {spec.nodes} workers that can hold it, {can}"


def _admits(spec: JobSpec, shape: Shape) -> bool:
    if not shape.mount_roots and not eligibility.asks_where(spec):
        return True
    labels = dict(shape.labels) if spec.node_selector or spec.node_affinity else {}
    return eligibility.admits(spec, shape.name, labels, shape.mount_roots)


def _no_worker_may(spec: JobSpec, refusals: list[str]) -> str:
    more = len(refusals) - _NAMED
    listed = "; ".join(refusals[:_NAMED]) + (f"; and {more} more" if more > 0 else "")
    if spec.worker is not None and not any(r.startswith(f"{spec.worker}:") for r in refusals):
        return f"no worker {spec.worker} is registered"
    return f"no worker may run it ({listed})"


def _holds(shape: Shape, needs: Resources) -> bool:
    """Whether a worker of this shape, empty, could run it: every dimension at once."""
    if shape.millicpus < needs.millicpus or shape.memory < needs.memory_bytes:
        return False
    want = needs.gpu_memory or 0
    return sum(1 for m in shape.gpu_memory if m >= want) >= needs.gpus


def _too_big(needs: Resources, shapes: Collection[Shape]) -> str:
    """The CPUs and memory it asks for that no worker has, and the largest there is."""
    asked, largest = [], []
    if needs.millicpus:
        asked.append(_cpus(needs.millicpus))
        largest.append(_cpus(max(s.millicpus for s in shapes)))
    if needs.memory_bytes:
        asked.append(f"{format_size(needs.memory_bytes)} of memory")
        largest.append(f"{format_size(max(s.memory for s in shapes))} of memory")
    gpus = f" besides {_count(needs.gpus, 'GPU')}" if needs.gpus else ""
    return f"no worker has {' and '.join(asked)}{gpus}; the largest has {' and '.join(largest)}"


def _cpus(millicpus: int) -> str:
    count = f"{millicpus / 1000:g}"
    return f"{count} CPU" if count == "1" else f"{count} CPUs"


def unschedulable_message(needs: Resources, shapes: Collection[Shape]) -> str | None:
    """Why no worker of these shapes has the GPUs a job needs; None if one has.

    A CPU job needs a slot, which every worker has; a GPU job needs that many GPUs on
    one worker, each with at least its gpu_memory (memory foreign processes use now is
    not counted here: it passes).
    """
    if not shapes or not needs.gpus:
        return None
    want = needs.gpu_memory or 0
    fitting = [sum(1 for m in s.gpu_memory if m >= want) for s in shapes]
    if max(fitting) >= needs.gpus:
        return None
    most_gpus = max(len(s.gpu_memory) for s in shapes)
    if not want or most_gpus < needs.gpus:
        return f"no worker has {_count(needs.gpus, 'GPU')}; the largest has {most_gpus}"
    largest = max((m for s in shapes for m in s.gpu_memory), default=0)
    known = f"the largest GPU has {format_size(largest)}" if largest else "no GPU's memory is known"
    most = max(fitting)
    have = f"at most {_count(most, 'GPU')} on one worker" if most else "no GPU"
    return (
        f"no worker has {_count(needs.gpus, 'GPU')} with {format_size(want)} each "
        f"({have} with that much; {known})"
    )


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _said_unschedulable(job: Job) -> str | None:
    """The message of the job's Unschedulable condition; None when it has none."""
    for c in job.status.conditions:
        if c.type == "Scheduled" and c.reason == UNSCHEDULABLE:
            return c.message
    return None


def _shape(worker: Worker) -> Shape:
    spec = worker.spec
    memory = spec.gpu_memory
    return Shape(
        spec.slots,
        tuple(sorted((memory.get(g, 0) for g in spec.gpus), reverse=True)),
        spec.millicpus,
        spec.memory or 0,
        worker.name,
        tuple(sorted(spec.labels.items())),
        tuple(spec.mount_roots),
        None if worker.status.users is None else frozenset(worker.status.users),
    )


class PlacementController:
    """Per-job key (and `*`): say, or unsay, that no worker could run a queued job."""

    name = "placement"
    worker_coalesce_s = 0.1  # every queued job looked at: a fleet registering, once

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.resync_s = ctx.settings.sweep_interval_s
        self._shapes: dict[str, Shape] = {}
        self._rooted: bool | None = None  # whether some worker names mount roots
        self._reload_shapes()

    def _reload_shapes(self) -> bool:
        shapes = {name: _shape(w) for name, w in self.ctx.view.workers.items()}
        changed = shapes != self._shapes
        self._shapes, self._rooted = shapes, None
        return changed

    def _message(self, job: Job) -> str | None:
        shapes = self._shapes.values()
        if self._rooted is None:  # worked out again after any worker's change
            self._rooted = any(s.mount_roots for s in shapes)
        return placement_message(job.spec, shapes, self._rooted, job.metadata.owner)

    def _differs(self, job: Job) -> bool:
        """Whether `job`'s condition says other than the verdict on it now."""
        if job.status.phase != Phase.PENDING:
            return False
        return self._message(job) != _said_unschedulable(job)

    def keys_for(self, change: Change) -> Iterable[str]:
        if change.kind == "Worker":
            return [EVERY_QUEUED_JOB] if self._worker_changed(change) else []
        job = change.job
        if change.op == "DELETED" or job is None:
            return []
        return [change.key] if self._differs(job) else []

    def _worker_changed(self, change: Change) -> bool:
        before = self._shapes.get(change.key)
        self._rooted = None
        if change.op == "DELETED":
            self._shapes.pop(change.key, None)
            return before is not None
        worker = change.obj
        if not isinstance(worker, Worker):
            return self._reload_shapes()
        self._shapes[change.key] = _shape(worker)
        return before != self._shapes[change.key]

    def keys_all(self) -> Iterable[str]:
        self._reload_shapes()
        return [EVERY_QUEUED_JOB]

    async def reconcile(self, key: str) -> Result:
        store = self.ctx.store
        if key == EVERY_QUEUED_JOB:
            for queued in store.list_jobs(phases=[Phase.PENDING]):
                if self._differs(queued):
                    self.ctx.enqueue(self.name, str(queued.id))
            return DONE
        job = store.get_job(int(key))
        if job is None or not self._differs(job):
            return DONE
        message = self._message(job)
        now = self.ctx.clock.now()
        moved = (
            transitions.unschedulable(job, message, now)
            if message
            else transitions.placeable(job, now)
        )
        try:
            store.update_job(*moved)
        except Conflict:
            return Result(requeue_after=0)
        return DONE
