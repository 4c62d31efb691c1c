"""The control plane's cost at rest and per decision, as history grows.

In process, no HTTP: a SQLite store is filled with N jobs (mostly Succeeded; 1% Pending,
half of them asking for a GPU no worker has, half waiting on one of those), then the
scheduler's CPU is measured with `time.process_time()` for a pass that binds one new
job and for an idle pass (nothing schedulable). Then a real `jobd broker` is started on
that database file, and its RSS and CPU% over a few idle seconds are read from /proc.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from jobd.api.models import (
    Job,
    JobSpec,
    ObjectMeta,
    Phase,
    WorkerSpec,
)
from jobd.bench.calls import PROJECT, TRUE
from jobd.bench.context import BenchContext
from jobd.bench.harness import BrokerProcess, client
from jobd.bench.history import fill_store
from jobd.bench.stats import Result, ms, percentile, rounded
from jobd.controllers.context import Context
from jobd.controllers.scheduler import SchedulerController
from jobd.controllers.verbs import admission
from jobd.controllers.verbs.worker_lease import register_worker
from jobd.store import open_store, sqlite_url

__all__ = ["run_reconcile"]

TARGET_SCHEDULE_CPU_MS = 1.0
TARGET_IDLE_CPU_PCT = 1.0
TARGET_RSS_MB = 500.0
_WORKER = "bench-sim"


@dataclass
class Figures:
    """What one store size cost."""

    jobs: int
    build_s: float
    schedule_cpu_s: list[float]
    idle_cpu_s: list[float]
    broker_ready_s: float = 0.0
    rss_mb: float = 0.0
    idle_cpu_pct: float = 0.0

    @property
    def met(self) -> bool:
        return (
            (percentile(self.schedule_cpu_s, 50) or 0) * 1000 <= TARGET_SCHEDULE_CPU_MS
            and self.idle_cpu_pct <= TARGET_IDLE_CPU_PCT
            and self.rss_mb <= TARGET_RSS_MB
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "jobs": self.jobs,
            "build_s": round(self.build_s, 2),
            "schedule_cpu_p50_ms": ms(percentile(self.schedule_cpu_s, 50)),
            "schedule_cpu_p99_ms": ms(percentile(self.schedule_cpu_s, 99)),
            "idle_pass_cpu_p50_ms": ms(percentile(self.idle_cpu_s, 50)),
            "broker_ready_s": round(self.broker_ready_s, 2),
            "rss_mb": round(self.rss_mb, 1),
            "idle_cpu_pct": rounded(self.idle_cpu_pct, 2),
            "met": self.met,
        }


async def _schedule_cpu(ctx: Context, reps: int) -> tuple[list[float], list[float]]:
    """CPU seconds of a scheduler pass binding one new job, and of an idle pass."""
    spec = WorkerSpec(slots=reps + 1, gpus=[])
    register_worker(ctx, _WORKER, spec, "sim", "sim")
    scheduler = SchedulerController(ctx)
    await scheduler.reconcile("queue")  # warm: imports, statement caches
    binding, idle = [], []
    for rep in range(reps):
        new = Job(
            metadata=ObjectMeta(name=f"new-{rep}", project=PROJECT), spec=JobSpec(command=[TRUE])
        )
        (job,) = admission.create_jobs(ctx.store, [new], ctx.clock)
        binding.append(await _cpu_of(scheduler))
        bound = ctx.store.get_job(job.id)
        if bound is None or bound.status.phase != Phase.SCHEDULED:
            raise RuntimeError(f"the scheduler did not bind job {job.id}")
        idle.append(await _cpu_of(scheduler))
    return binding, idle


async def _cpu_of(scheduler: SchedulerController) -> float:
    began = time.process_time()
    await scheduler.reconcile("queue")
    return time.process_time() - began


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def _broker_at_rest(ctx: BenchContext, root: Path, figures: Figures) -> None:
    """Start `jobd broker` on the filled store; RSS and CPU% over a few idle seconds."""
    settle_s, window_s = ctx.sized((0.5, 1.0), (2.0, 3.0), (3.0, 5.0))
    broker = BrokerProcess(root / "broker", "broker", db_url=sqlite_url(root))
    began = time.monotonic()
    broker.spawn()
    try:
        async with client(broker.endpoint) as http:
            await broker.wait_ready(http)
        figures.broker_ready_s = time.monotonic() - began
        await anyio.sleep(settle_s)
        cpu0, wall0 = broker.cpu_seconds()["broker"], time.monotonic()
        await anyio.sleep(window_s)
        cpu1, wall1 = broker.cpu_seconds()["broker"], time.monotonic()
        figures.idle_cpu_pct = 100 * (cpu1 - cpu0) / (wall1 - wall0)
        figures.rss_mb = _rss_mb(broker.pid)
    finally:
        broker.stop()


async def _measure(ctx: BenchContext, total: int, reps: int) -> Figures:
    root = ctx.scratch(f"reconcile-{total}")
    store = open_store(sqlite_url(root))
    try:
        began = time.monotonic()
        fill_store(store, total, ctx.progress)
        build_s = time.monotonic() - began
        ctx.progress.step(f"scheduling against {total} jobs")
        binding, idle = await _schedule_cpu(Context(store), reps)
    finally:
        store.close()
    figures = Figures(total, build_s, binding, idle)
    ctx.progress.step(f"broker at rest on {total} jobs")
    await _broker_at_rest(ctx, root, figures)
    return figures


async def run_reconcile(ctx: BenchContext) -> Result:
    ctx.require_own_broker("it measures a store and a broker of its own")
    sizes, reps = ctx.sized(([1_000], 5), ([1_000, 10_000], 20), ([1_000, 100_000], 20))
    measured = [await _measure(ctx, total, reps) for total in sizes]
    return _result(measured)


def _result(measured: list[Figures]) -> Result:
    largest = measured[-1]
    result = Result("reconcile", n=largest.jobs, per_s=None)
    result.latencies(largest.schedule_cpu_s)
    result.target = (
        f"schedule <= {TARGET_SCHEDULE_CPU_MS:g} ms CPU, idle <= {TARGET_IDLE_CPU_PCT:g}% CPU, "
        f"RSS <= {TARGET_RSS_MB:.0f} MB"
    )
    result.met = all(f.met for f in measured)
    result.extra = largest.as_json() | {"by_jobs": [f.as_json() for f in measured]}
    result.notes = "n = jobs stored; p50/p99 = CPU ms of a pass binding one new job"
    result.details = [
        f"{f.jobs} jobs: schedule {ms(percentile(f.schedule_cpu_s, 50))} ms CPU, idle pass "
        f"{ms(percentile(f.idle_cpu_s, 50))} ms, broker {f.rss_mb:.0f} MB RSS, "
        f"{f.idle_cpu_pct:.2f}% CPU idle"
        for f in measured
    ]
    return result
