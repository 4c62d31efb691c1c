"""The cost of placing jobs of several nodes (gangs) on the `placement` scenario's fleet.

In process, as `placement`: a SQLite store and the controllers' context, W workers of
mixed inventories registered through the registration verb (placement.worker_spec), a
quarter of their room taken first by the mixed jobs `placement` binds, so rooms differ.
Then gangs are submitted one at a time, 2 and 4 nodes in turn (and, as the control, jobs of
one node the same way), each of one of three kinds
(naming nothing, CPUs and memory, a GPU with its memory), through admission (which judges
each against every worker) and bound by one scheduler pass. The figures: the time from
the create to the bind (wall, `time.perf_counter()`: admission, the pass and the store's
writes; no HTTP), p50 and p99 for each size, and the scheduler's CPU time per gang
decision (`time.process_time()` around the pass). A pass that binds one job has a cost of
its own (the queue read, the write), so the target is on what a gang adds to it: at most
the `placement` target (1 ms CPU) for each member past the first, p50 against the one-node
jobs' p50. Every gang must be bound whole, on distinct workers.
"""

from __future__ import annotations

import time
from typing import Any

from jobd.api.models import Job, JobSpec, ObjectMeta, Phase, Resources
from jobd.bench.calls import PROJECT, TRUE
from jobd.bench.collector import as_the_broker_collects
from jobd.bench.context import BenchContext
from jobd.bench.placement import TARGET_CPU_MS_PER_JOB, mixed_jobs, worker_spec
from jobd.bench.stats import Result, ms, percentile
from jobd.controllers.context import Context
from jobd.controllers.scheduler import QUEUE_KEY, SchedulerController
from jobd.controllers.verbs import admission
from jobd.controllers.verbs.worker_lease import register_worker
from jobd.store import open_store, sqlite_url

__all__ = ["run_gang"]

GIB = 1 << 30
_SIZES = (1, 2, 4)  # 1: the control, a job of one node placed the same way


def _gang(i: int) -> Job:
    """Gang i: 1, 2 or 4 nodes in turn, of one of three kinds."""
    kind = i // len(_SIZES) % 3
    resources = (
        Resources(),
        Resources(cpus=4, memory=16 * GIB),
        Resources(gpus=1, gpu_memory=20 * GIB, cpus=2, memory=8 * GIB),
    )[kind]
    # Ahead of what the fill left queued (priority 0): the pass reaches it first.
    nodes = _SIZES[i % len(_SIZES)]
    spec = JobSpec(command=[TRUE], nodes=nodes, resources=resources, priority=1)
    return Job(metadata=ObjectMeta(name=f"gang-{i}", project=PROJECT), spec=spec)


class _Figures:
    """Each gang's submit-to-bind wall time and its pass's CPU time, by its size."""

    def __init__(self) -> None:
        self.wall: dict[int, list[float]] = {n: [] for n in _SIZES}
        self.cpu: dict[int, list[float]] = {n: [] for n in _SIZES}

    def extra(self) -> dict[str, Any]:
        found: dict[str, Any] = {}
        for n in _SIZES:
            for name, samples in (("bind_ms", self.wall[n]), ("cpu_ms", self.cpu[n])):
                found[f"{name}_{n}_nodes_p50"] = ms(percentile(samples, 50))
                found[f"{name}_{n}_nodes_p99"] = ms(percentile(samples, 99))
        return found


async def _measure(ctx: Context, gangs: int, figures: _Figures) -> None:
    scheduler = SchedulerController(ctx)
    for i in range(gangs):
        gang = _gang(i)
        began = time.perf_counter()
        (created,) = admission.create_jobs(ctx.store, [gang], ctx.clock)
        pass_cpu = time.process_time()
        await scheduler.reconcile(QUEUE_KEY)
        done_cpu, done = time.process_time(), time.perf_counter()
        bound = ctx.store.get_job(created.id)
        if bound is None or bound.status.phase != Phase.SCHEDULED:
            raise RuntimeError(f"gang {i} was not bound on a fleet with room for it")
        workers = {m.worker for m in bound.status.members} or {bound.status.worker or ""}
        if len(workers) != gang.spec.nodes:
            raise RuntimeError(f"gang {i} was bound on {len(workers)} distinct workers")
        nodes = gang.spec.nodes
        figures.wall[nodes].append(done - began)
        figures.cpu[nodes].append(done_cpu - pass_cpu)


async def _fill(ctx: Context, jobs: int) -> None:
    """Take some room first, with the mixed jobs `placement` binds (a pass scans a
    bounded part of the queue: a few passes)."""
    admission.create_jobs(ctx.store, mixed_jobs(0, jobs), ctx.clock)
    for _ in range(jobs // 100 + 1):
        await SchedulerController(ctx).reconcile(QUEUE_KEY)


async def run_gang(ctx: BenchContext) -> Result:
    ctx.require_own_broker("it measures controllers of its own, in process")
    workers, gangs = ctx.sized((100, 30), (1000, 90), (1000, 300))
    store = open_store(sqlite_url(ctx.scratch("gang")))
    figures = _Figures()
    try:
        context = Context(store)
        for i in range(workers):
            register_worker(context, f"node-{i:04d}", worker_spec(i), "sim", "sim")
        ctx.progress.step(f"{workers} workers registered")
        await _fill(context, workers)
        with as_the_broker_collects():
            await _measure(context, gangs, figures)
    finally:
        store.close()
    return _result(workers, gangs, figures)


def _result(workers: int, gangs: int, figures: _Figures) -> Result:
    result = Result("gang", n=gangs, per_s=None)
    result.latencies([s for n in _SIZES[1:] for s in figures.wall[n]])
    extra = figures.extra()
    alone = percentile(figures.cpu[1], 50) or 0.0
    added = max(((percentile(figures.cpu[n], 50) or 0.0) - alone) / (n - 1) for n in _SIZES[1:])
    result.extra = {"workers": workers, **extra, "cpu_ms_added_per_member_p50": ms(added)}
    result.target = (
        f"a gang's pass <= {TARGET_CPU_MS_PER_JOB:g} ms CPU more per member past the first "
        f"than a one-node job's ({workers} workers)"
    )
    result.met = added * 1000 <= TARGET_CPU_MS_PER_JOB
    result.notes = (
        f"{workers} workers of mixed inventories; p50/p99 = submit to bind (wall ms) of "
        "gangs of 2 and 4 nodes, one at a time"
    )
    result.details = [
        f"{n} nodes: submit to bind {extra[f'bind_ms_{n}_nodes_p50']} / "
        f"{extra[f'bind_ms_{n}_nodes_p99']} ms, scheduler CPU per gang "
        f"{extra[f'cpu_ms_{n}_nodes_p50']} / {extra[f'cpu_ms_{n}_nodes_p99']} ms (p50 / p99)"
        for n in _SIZES
    ]
    return result
