"""The cost of a placement decision over a large fleet of mixed inventories.

In process, no HTTP, as `reconcile`: a SQLite store and the controllers' context, with
W workers registered through the registration verb, each of its own shape (CPUs from 4
to 128, memory from 16GiB to 512GiB, 8 or 16 slots, a `site` label of four, one in four
with GPUs and their memory, one in three with a mount root). Jobs of every kind are then
submitted in batches (a quarter naming nothing, a quarter CPUs and memory, a quarter a
selector and CPUs, a quarter GPUs with memory, an affinity and a cwd under a mount root)
through admission, which judges each against every worker (the Unschedulable verdict),
and bound by one scheduler pass each batch. The figures, CPU time by
`time.process_time()`: admission per job, and the scheduler's pass per job it bound (p50
and p99 over batches): what a job's placement costs the broker with W workers. The
collector runs as in `jobd broker` (daemon/main.py: what start-up built frozen, young
passes every 20,000 allocations); its time inside the passes is reported apart
(`gc_ms_in_passes`), since where a full collection lands is chance.
"""

from __future__ import annotations

import time
from typing import Any

from jobd.api.models import (
    Job,
    JobSpec,
    LabelExpression,
    ObjectMeta,
    Phase,
    Project,
    ProjectQuota,
    ProjectSpec,
    Resources,
    WorkerSpec,
)
from jobd.bench.calls import PROJECT, TRUE
from jobd.bench.collector import Collections, as_the_broker_collects
from jobd.bench.context import BenchContext
from jobd.bench.stats import Result, ms, percentile
from jobd.controllers.context import Context
from jobd.controllers.scheduler import QUEUE_KEY, SchedulerController
from jobd.controllers.verbs import admission
from jobd.controllers.verbs.worker_lease import register_worker
from jobd.store import open_store, sqlite_url

__all__ = [
    "TARGET_CPU_MS_PER_JOB",
    "mixed_jobs",
    "run_placement",
    "run_placement_fair",
    "worker_spec",
]

TARGET_CPU_MS_PER_JOB = 1.0  # the scheduler's pass, per job it binds
GIB = 1 << 30
_CPUS = (4, 8, 16, 32, 64, 128)
_MEMORY = (16, 32, 64, 128, 256, 512)
_SITES = ("lab0", "lab1", "lab2", "lab3")


def worker_spec(i: int) -> WorkerSpec:
    """Worker i's own shape: the six sizes, four sites, GPUs on one in four."""
    gpus = [0, 1, 2, 3] if i % 4 == 0 else []
    return WorkerSpec(
        slots=8 if i % 2 else 16,
        gpus=gpus,
        gpu_memory={g: (24 if i % 8 else 80) * GIB for g in gpus},
        cpus=_CPUS[i % len(_CPUS)],
        memory=_MEMORY[(i // 2) % len(_MEMORY)] * GIB,
        labels={"site": _SITES[i % len(_SITES)], "arch": "amd64", "os": "linux"},
        mount_roots=["/data"] if i % 3 == 0 else [],
    )


def _job_spec(i: int) -> dict[str, Any]:
    """Job i's request: one of four kinds, in turn."""
    kind = i % 4
    if kind == 0:
        return {}
    if kind == 1:
        return {"resources": Resources(cpus=2 + i % 6, memory=(4 + i % 12) * GIB)}
    if kind == 2:
        site = {"site": _SITES[i % len(_SITES)]}
        return {"node_selector": site, "resources": Resources(cpus=0.5)}
    affinity = [LabelExpression(key="site", operator="NotIn", values=["lab3"])]
    return {
        "resources": Resources(gpus=1, gpu_memory=20 * GIB, cpus=4, memory=16 * GIB),
        "node_affinity": affinity,
        "cwd": "/data/run",
    }


def mixed_jobs(first: int, count: int, projects: tuple[str, ...] = (PROJECT,)) -> list[Job]:
    return [
        Job(
            metadata=ObjectMeta(name=f"p-{i}", project=projects[i % len(projects)]),
            spec=JobSpec(command=[TRUE], **_job_spec(i)),
        )
        for i in range(first, first + count)
    ]


async def _measure(
    ctx: Context,
    batches: int,
    batch: int,
    collections: Collections,
    projects: tuple[str, ...] = (PROJECT,),
) -> tuple[list[float], list[float]]:
    """Admission CPU seconds per job, and scheduler CPU seconds per bound job, by batch."""
    scheduler = SchedulerController(ctx)
    await scheduler.reconcile(QUEUE_KEY)  # warm: imports, statement caches
    admitted, scheduled = [], []
    collections.counting = False  # only inside the passes
    for b in range(batches):
        began = time.process_time()
        jobs = mixed_jobs(b * batch, batch, projects)
        created = admission.create_jobs(ctx.store, jobs, ctx.clock)
        admitted.append((time.process_time() - began) / batch)
        began = time.process_time()
        collections.counting = True
        await scheduler.reconcile(QUEUE_KEY)
        collections.counting = False
        spent = time.process_time() - began
        bound = [ctx.store.get_job(j.id) for j in created]
        count = sum(1 for j in bound if j is not None and j.status.phase == Phase.SCHEDULED)
        if count == 0:
            raise RuntimeError("the scheduler bound none of a batch the fleet has room for")
        scheduled.append(spent / count)
    return admitted, scheduled


async def run_placement(ctx: BenchContext) -> Result:
    return await _placement(ctx, "placement", fair=False)


async def run_placement_fair(ctx: BenchContext) -> Result:
    """`placement` with fair share and quotas on: the jobs of four projects of unequal
    shares, past usage, quotas and a per-user limit none of them reaches (every job is
    checked, none held back), so each pass merges four queues by factor."""
    return await _placement(ctx, "placement-fair", fair=True)


_FAIR_PROJECTS = ("alpha", "beta", "gamma", "delta")


def _fair_projects(context: Context) -> None:
    quota = ProjectQuota(gpus=100_000, cpus=1_000_000, running_jobs=1_000_000)
    for shares, name in enumerate(_FAIR_PROJECTS, start=1):
        spec = ProjectSpec(shares=shares, quota=quota, max_running_per_user=1_000_000)
        context.store.put_project(Project(metadata=ObjectMeta(name=name), spec=spec))
        now = context.clock.now().timestamp()
        context.usage.charge(name, "", 3600.0 * shares, now, context.settings.billing.half_life_s)


async def _placement(ctx: BenchContext, name: str, fair: bool) -> Result:
    ctx.require_own_broker("it measures controllers of its own, in process")
    workers, batches, batch = ctx.sized((100, 5, 20), (1000, 10, 50), (1000, 20, 100))
    root = ctx.scratch(name)
    store = open_store(sqlite_url(root))
    try:
        context = Context(store)
        for i in range(workers):
            register_worker(context, f"node-{i:04d}", worker_spec(i), "sim", "sim")
        if fair:
            _fair_projects(context)
        ctx.progress.step(f"{workers} workers registered")
        projects = _FAIR_PROJECTS if fair else (PROJECT,)
        with as_the_broker_collects() as collections:
            admitted, scheduled = await _measure(context, batches, batch, collections, projects)
    finally:
        store.close()
    result = _result(workers, batches * batch, admitted, scheduled)
    result.scenario = name
    result.extra["gc_ms_in_passes"] = round(collections.seconds * 1000, 1)
    return result


def _result(workers: int, jobs: int, admitted: list[float], scheduled: list[float]) -> Result:
    result = Result("placement", n=jobs, per_s=None)
    result.latencies(scheduled)
    result.target = f"schedule <= {TARGET_CPU_MS_PER_JOB:g} ms CPU per job ({workers} workers)"
    result.met = (result.p99_ms or 0) <= TARGET_CPU_MS_PER_JOB
    result.extra = {
        "workers": workers,
        "admission_cpu_ms_per_job_p50": ms(percentile(admitted, 50)),
        "admission_cpu_ms_per_job_p99": ms(percentile(admitted, 99)),
    }
    result.notes = (
        f"{workers} workers of mixed inventories; p50/p99 = scheduler CPU ms per job bound, "
        "by batch"
    )
    result.details = [
        f"admission (verdict against every worker): "
        f"{result.extra['admission_cpu_ms_per_job_p50']} ms CPU per job p50, "
        f"{result.extra['admission_cpu_ms_per_job_p99']} ms p99"
    ]
    return result
