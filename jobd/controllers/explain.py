"""`job explain`: why a queued job is not running, worker by worker, in numbers.

A pure function of what the scheduler itself reads — the job, the registered workers (and
which were heard from), the jobs bound to them, the nominated jobs room is held for, the
queue ahead of it, its parents, its array's bound members — judged by the very functions
the scheduler, placement and `job preempt-blockers --dry-run` use (capacity.py,
eligibility.py, placement.py, verbs/preempt.py): no second copy of any rule. For each
worker it says what keeps the job out (not heard from, Lost, cordoned, disk full, a rule
of eligibility naming the label or the mount roots, too small even when empty, or short
now of slots, GPUs, GPU memory, CPUs, memory — by how much, GPU memory taken by other
programs included); then the job's place in the queue, the parents it waits for, its
retry backoff, its array's cap, and which victims preemption would take. A job of several
nodes (a gang) needs that many workers to fit at once: it says how many it needs and
which workers could take a member now (`gang`). The broker's
route (broker/routes/jobs.py) gathers the inputs; the answer is a JSON document with a
sentence for each finding, which `job explain` and the MCP tool print as they are.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from jobd.api.models import Job, Phase, Worker, WorkerPhase
from jobd.api.sizes import format_size
from jobd.api.wait_reasons import WaitReason
from jobd.controllers import eligibility
from jobd.controllers.capacity import (
    Capacity,
    capacity_of,
    empty_capacity,
    hold_for,
    nominated_on,
    schedulable,
)
from jobd.controllers.errors import TransitionError
from jobd.controllers.placement import placement_message, shapes_of
from jobd.controllers.verbs.preempt import blockers_plan
from jobd.controllers.worker_disk import disk_is_full

__all__ = ["Cluster", "Queue", "explain"]

Document = dict[str, Any]


@dataclass
class Cluster:
    """What the scheduler sees (the broker's cluster view), as plain values."""

    workers: Sequence[Worker]
    heard: Container[str]  # the workers heard from since the broker started
    bound: Sequence[Job]  # every job holding capacity on a worker
    nominated: Iterable[Job] = ()  # queued jobs room is being freed and held for


@dataclass
class Queue:
    """Where the job stands: the ready jobs ahead of it, its parents, its array."""

    ahead: int = 0
    ahead_higher: int = 0  # of those, with a higher priority
    parents: Sequence[tuple[int, Job | None]] = ()  # each parent id, None when gone
    array_bound: int = 0  # members of its array bound now
    now: datetime | None = None


def explain(job: Job, cluster: Cluster, queue: Queue) -> Document:
    """The explanation of `job`'s state: for a Pending job every finding, else its phase."""
    status = job.status
    head: Document = {"job": job.id, "name": job.ref, "phase": status.phase.value}
    if status.phase != Phase.PENDING:
        return {**head, "summary": _not_queued(job)}
    caps = capacity_of(schedulable(cluster.workers, cluster.heard), cluster.bound)
    hold_for(cluster.nominated, caps)
    workers = [_worker(job, w, cluster.heard, caps.get(w.name)) for w in cluster.workers]
    unplaceable = placement_message(job.spec, shapes_of(cluster.workers))
    fits = sorted(w["worker"] for w in workers if w["fits"])
    reason, message = _reason(job, unplaceable, fits, queue)
    found: Document = {
        **head,
        "reason": reason.value,
        "message": message,
        "condition": _condition(job),
        "summary": f"job {job.id} is Pending: {message}",
        "fits": fits,
        "workers": workers,
        "queue": _queue(job, queue),
        "dependencies": _dependencies(job, queue),
        "retry": _retry(job, queue),
        "array": _array(job, queue),
        "preemption": _preemption(job, cluster, fits, unplaceable),
    }
    if job.spec.nodes > 1:  # a job of one node is answered as it always was
        found["gang"] = _gang(job, fits)
    return found


def _fits_now(job: Job, fits: list[str]) -> bool:
    """Whether enough workers have room now: one, or one per member of a gang."""
    return len(fits) >= job.spec.nodes


def _gang(job: Job, fits: list[str]) -> Document:
    """A gang's count: the workers it needs at once, and those that could take a member."""
    nodes = job.spec.nodes
    return {"nodes": nodes, "fit": fits, "says": _gang_says(nodes, fits)}


def _gang_says(nodes: int, fits: list[str]) -> str:
    could = f"{len(fits)} could take a member now" + (f": {', '.join(fits)}" if fits else "")
    return f"it needs {nodes} workers with room for a member each at once; {could}"


def _condition(job: Job) -> Document | None:
    """What the job's `Scheduled` condition says now (set where the scheduler decided)."""
    for c in job.status.conditions:
        if c.type == "Scheduled" and c.status == "False":
            return {"reason": c.reason, "message": c.message}
    return None


def _reason(
    job: Job, unplaceable: str | None, fits: list[str], queue: Queue
) -> tuple[WaitReason, str]:
    """The most binding reason it waits, by the order of api/wait_reasons.py."""
    status = job.status
    held = _condition(job)
    if unplaceable is not None:
        return WaitReason.UNSCHEDULABLE, unplaceable
    if status.retry_at is not None:
        return WaitReason.RETRY_BACKOFF, f"it waits out its retry backoff until {_at(status)}"
    if not status.dependencies_met:
        waiting = [str(i) for i, p in queue.parents if p is None or not p.status.phase.terminal]
        return WaitReason.WAITING_FOR_DEPENDENCIES, f"it waits for job {', '.join(waiting)}"
    array = job.metadata.array
    if array is not None and array.parallelism and queue.array_bound >= array.parallelism:
        said = f"its array {array.name} has {queue.array_bound} of at most "
        return WaitReason.ARRAY_PARALLELISM, said + f"{array.parallelism} members running"
    if held is not None and held["reason"] == WaitReason.QUOTA_EXCEEDED:
        return WaitReason.QUOTA_EXCEEDED, held["message"]
    if fits and not _fits_now(job, fits):
        return WaitReason.WAITING_FOR_CAPACITY, _gang_says(job.spec.nodes, fits)
    if fits:
        ahead = f"; {_count(queue.ahead, 'job')} ahead of it" if queue.ahead else ""
        return (
            WaitReason.WAITING_FOR_CAPACITY,
            f"it fits on {', '.join(fits)} now and is bound at the scheduler's next pass{ahead}",
        )
    return WaitReason.WAITING_FOR_CAPACITY, "no worker it may use has the room free now"


def _at(status: Any) -> str:
    return str(status.retry_at.isoformat()) if status.retry_at else "-"


# -- each worker


def _worker(job: Job, worker: Worker, heard: Container[str], cap: Capacity | None) -> Document:
    """What keeps `job` from `worker`, each finding a sentence; `fits` when nothing does."""
    says: list[str] = []
    state = _state(worker, heard)
    if state != "Ready":
        says.append(_STATES[state])
    spec = worker.spec
    refused = eligibility.why_not(
        job.spec, worker.name, spec.labels, spec.mount_roots
    ) or eligibility.owner_refusal(job.metadata.owner, worker.status.users)
    if refused is not None:
        says.append(refused)
    whole = empty_capacity(worker)
    whole.gpu_memory = dict(spec.gpu_memory)  # all of it: what other programs use aside
    too_small = _short(job, whole, whole, empty=True)
    says += [f"too small even when empty: {item['says']}" for item in too_small]
    short: list[Document] = []
    if cap is not None and refused is None and not too_small:
        short = _short(job, cap, whole)
        says += [f"short of {item['says']}" for item in short]
        says += _foreign_gpu_memory(job, worker, cap, short)
        says += _held(job, cap, short)
    fits = not says
    return {
        "worker": worker.name,
        "state": state,
        "fits": fits,
        "eligible": refused is None,
        "excluded_by": refused,
        "short": [*too_small, *short],
        "says": says or ["fits now"],
    }


_STATES = {
    "NotHeard": "not heard from since the broker started (it gets nothing until it speaks)",
    "Lost": "Lost: its lease ran out",
    "Cordoned": "cordoned: no new job is placed there",
    "DiskFull": "its disk is full: no new job is placed there",
}


def _state(worker: Worker, heard: Container[str]) -> str:
    if worker.status.phase == WorkerPhase.LOST:
        return "Lost"
    if worker.name not in heard:
        return "NotHeard"
    if worker.spec.cordoned:
        return "Cordoned"
    return "DiskFull" if disk_is_full(worker) else "Ready"


def _short(job: Job, cap: Capacity, whole: Capacity, empty: bool = False) -> list[Document]:
    """Each dimension `job` is short of on `cap`, with what is needed, free and there
    (`empty`: `cap` is the whole worker, as if nothing ran there)."""
    items = []
    needs = job.spec.resources
    for dimension, (need, free) in cap.shortfall(job).items():
        if dimension == "gpus" and needs.gpu_memory and len(cap.free_gpus) >= needs.gpus:
            item = _gpu_memory(job, cap, whole, empty)
        else:
            item = _item(dimension, need, free, _TOTALS[dimension](whole), empty)
        items.append({**item, "when_empty": True} if empty else item)
    return items


_TOTALS: dict[str, Callable[[Capacity], int]] = {
    "slots": lambda c: c.free_slots,
    "gpus": lambda c: len(c.free_gpus),
    "cpus": lambda c: c.total_millicpus,
    "memory": lambda c: c.total_memory,
}


def _item(dimension: str, need: int, free: int, total: int, empty: bool = False) -> Document:
    shown = _SHOW[dimension]
    free = max(0, free)
    item: Document = {
        "resource": dimension,
        "need": _value(dimension, need),
        "free": _value(dimension, free),
        "total": _value(dimension, total),
        "short_by": _value(dimension, need - free),
    }
    if empty:
        item["says"] = f"{dimension} (needs {shown(need)}, has {shown(total)})"
    else:
        item["says"] = (
            f"{dimension} by {shown(need - free)} (needs {shown(need)}, "
            f"{shown(free)} free of {shown(total)})"
        )
    return item


def _value(dimension: str, amount: int) -> int | float:
    return amount / 1000 if dimension == "cpus" else amount


def _cpus(millicpus: int) -> str:
    return f"{millicpus / 1000:g}"


_SHOW: dict[str, Callable[[int], str]] = {
    "slots": str,
    "gpus": str,
    "cpus": _cpus,
    "memory": format_size,
    "gpu_memory": format_size,
}


def _gpu_memory(job: Job, cap: Capacity, whole: Capacity, empty: bool) -> Document:
    """Free GPUs enough, but not with the memory it asks on each: the best there is."""
    needs = job.spec.resources
    want = needs.gpu_memory or 0
    free = sorted((cap.gpu_memory.get(g, 0) for g in cap.free_gpus), reverse=True)
    nth = free[needs.gpus - 1] if len(free) >= needs.gpus else 0
    largest = max(whole.gpu_memory.values(), default=0)
    item = _item("gpu_memory", want, nth, largest)
    each = f"{format_size(want)} on each of {_count(needs.gpus, 'GPU')}"
    if empty:
        known = f"the largest has {format_size(largest)}" if largest else "none's is known"
        item["says"] = f"gpu_memory (needs {each}; {known})"
    else:
        item["says"] = (
            f"gpu_memory by {format_size(want - nth)} on a GPU (needs {each} free; the best "
            f"free GPUs have {format_size(nth)}; the largest has {format_size(largest)})"
        )
    return item


def _foreign_gpu_memory(
    job: Job, worker: Worker, cap: Capacity, short: list[Document]
) -> list[str]:
    """GPU memory that programs jobd did not start hold, where it keeps the job out."""
    if not any(s["resource"] in ("gpus", "gpu_memory") for s in short):
        return []
    want = job.spec.resources.gpu_memory or 0
    says = []
    for gpu, used in sorted(worker.status.gpu_memory_foreign.items()):
        total = worker.spec.gpu_memory.get(gpu, 0)
        if used and total >= want > total - used:
            says.append(
                f"GPU {gpu}: {format_size(used)} of {format_size(total)} taken by programs "
                "jobd did not start"
            )
    return says


def _held(job: Job, cap: Capacity, short: list[Document]) -> list[str]:
    """Room held for nominated jobs, where without it the job would fit."""
    others = sorted(i for i in cap.reserved if i != job.id)
    if not short or not others:
        return []
    free = cap.copy()
    free.reserved = {}
    if free.shortfall(job):
        return []
    return [f"the free room is held for job {', '.join(map(str, others))} (preemption freed it)"]


# -- the queue, parents, backoff, array, preemption


def _queue(job: Job, queue: Queue) -> Document | None:
    status = job.status
    if not status.dependencies_met or status.retry_at is not None:
        return None  # not in the queue yet
    priority = status.effective.priority
    same = queue.ahead - queue.ahead_higher
    says = (
        f"{_count(queue.ahead, 'job')} ahead of it: {queue.ahead_higher} of higher priority, "
        f"{same} of priority {priority} queued before it"
    )
    if status.nominated_worker:
        says += f"; room is being freed for it on {', '.join(nominated_on(job))}"
    return {
        "priority": priority,
        "ahead": queue.ahead,
        "ahead_higher_priority": queue.ahead_higher,
        "position": queue.ahead + 1,
        "nominated_worker": status.nominated_worker,
        "says": says,
    }


def _dependencies(job: Job, queue: Queue) -> list[Document]:
    found = []
    for parent_id, parent in queue.parents:
        phase = parent.status.phase.value if parent is not None else None
        found.append(
            {
                "job": parent_id,
                "name": parent.ref if parent is not None else None,
                "phase": phase,
                "says": f"job {parent_id} "
                + (f"{parent.ref} is {phase}" if parent is not None else "is gone"),
            }
        )
    return found


def _retry(job: Job, queue: Queue) -> Document | None:
    status = job.status
    if status.retry_at is None:
        return None
    left = (status.retry_at - queue.now).total_seconds() if queue.now else None
    when = f" (in {max(0.0, left):.0f} s)" if left is not None else ""
    return {
        "retry_at": status.retry_at.isoformat(),
        "in_s": None if left is None else max(0.0, left),
        "retries": status.retries,
        "says": f"retry {status.retries} waits out its backoff until "
        f"{status.retry_at.isoformat()}{when}",
    }


def _array(job: Job, queue: Queue) -> Document | None:
    array = job.metadata.array
    if array is None or not array.parallelism:
        return None
    capped = queue.array_bound >= array.parallelism
    return {
        "id": array.id,
        "name": array.name,
        "parallelism": array.parallelism,
        "bound": queue.array_bound,
        "capped": capped,
        "says": f"array A{array.id} {array.name}: {queue.array_bound} of at most "
        f"{array.parallelism} members bound" + (" (its cap)" if capped else ""),
    }


def _preemption(job: Job, cluster: Cluster, fits: list[str], unplaceable: str | None) -> Document:
    """What `job preempt-blockers --dry-run` would say: the same function answers."""
    if unplaceable is not None:
        return {"possible": False, "says": "no preemption helps: no worker could ever run it"}
    # Not queued (waiting on parents or a backoff): blockers_plan says what it waits for.
    if _fits_now(job, fits) and job.status.ready:
        return {"possible": False, "says": "no preemption needed: it fits now"}
    bound = list(cluster.bound)
    caps = capacity_of(schedulable(cluster.workers, cluster.heard), bound)
    try:
        plan = blockers_plan(job, caps, bound)
    except TransitionError as exc:
        return {"possible": False, "says": str(exc)}
    victims = [
        {"job": v.id, "name": v.ref, "priority": v.status.effective.priority} for v in plan.victims
    ]
    listed = ", ".join(f"job {v['job']} (priority {v['priority']})" for v in victims)
    where = ", ".join(plan.workers)
    found: Document = {"possible": True, "worker": plan.worker, "victims": victims}
    if plan.gang:
        found["workers"] = plan.workers
    return {**found, "says": f"`job preempt-blockers {job.id}` would preempt {listed} on {where}"}


def _not_queued(job: Job) -> str:
    """A job that is not Pending: its phase, and why, in a sentence."""
    status = job.status
    worker = status.worker or "?"
    phase = status.phase
    if phase == Phase.SCHEDULED:
        return f"job {job.id} is bound to {worker}; the worker is starting it"
    if phase == Phase.RUNNING:
        return f"job {job.id} is Running on {worker} (attempt {status.attempt})"
    if phase in (Phase.PREEMPTING, Phase.CANCELLING):
        return f"job {job.id} is {phase.value} on {worker}: SIGTERM sent, its grace running"
    if phase == Phase.LOST:
        return f"job {job.id} is Lost: its worker {worker} stopped renewing its lease"
    code = f"exit code {status.exit_code}" if status.exit_code is not None else None
    why = status.reason or status.message or code  # a reason names the exit (`exit 0`)
    return f"job {job.id} has ended {phase.value}" + (f" ({why})" if why else "")


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"
