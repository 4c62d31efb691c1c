"""`healthz`: how long the broker takes to answer `GET /healthz` while it is busy.

Eight clients submit jobs one at a time (`POST /jobs`) to `jobd broker` with one `jobd
worker --slots 8` beside it, and the jobs drain; meanwhile a ninth client asks
`/healthz` every 10 ms. /healthz does no work of its own, so its latency is how long
the broker's event loop was held by something else: on PostgreSQL, the store's round
trips, unless they run off the loop (store/runner.py). The figure is its p50/p99 under
that load; the same probe on the idle broker first, for comparison. Then the probe goes
on while n more jobs, sent in one apply as `drain` sends them, drain through the 8 slots:
`drain_per_s` (apply sent -> the last job's finished_at) with /healthz's p50/p99 during
it (`drain_healthz_p50_ms`, `drain_healthz_p99_ms`), the store's figure at full speed.
Opt-in (named with `--scenario healthz`); `JOBD_BENCH_DB` runs it on PostgreSQL.
"""

from __future__ import annotations

import time

import anyio
import httpx

from jobd.bench.calls import PROJECT, create_job, job_doc
from jobd.bench.context import BenchContext
from jobd.bench.dispatch import DRAIN_SLOTS, wait_drained
from jobd.bench.harness import Endpoint, client
from jobd.bench.stats import Result, ms, parse_ts, percentile, rate
from jobd.wire import routes

__all__ = ["run_healthz"]

TARGET_P99_MS = 20.0
TARGET_DRAIN_PER_S = 250.0
CLIENTS = 8
PROBE_EVERY_S = 0.01
IDLE_PROBE_S = 1.0


async def _probe(http: httpx.AsyncClient, samples: list[float], stop: anyio.Event) -> None:
    """GET /healthz every PROBE_EVERY_S until `stop`; each answer's time into `samples`."""
    while not stop.is_set():
        began = time.perf_counter()
        await http.get(routes.HEALTHZ.url())
        samples.append(time.perf_counter() - began)
        await anyio.sleep(PROBE_EVERY_S)


async def _probe_for(http: httpx.AsyncClient, seconds: float) -> list[float]:
    samples: list[float] = []
    stop = anyio.Event()
    async with anyio.create_task_group() as tg:
        tg.start_soon(_probe, http, samples, stop)
        await anyio.sleep(seconds)
        stop.set()
    return samples


async def _submit(ctx: BenchContext, http: httpx.AsyncClient, project: str, count: int) -> None:
    for i in range(count):
        if ctx.time_left() <= 0:
            return
        await create_job(http, job_doc(project=project))
        ctx.progress.step("submitting", i + 1, count)


async def _load(ctx: BenchContext, endpoint: Endpoint, project: str, total: int) -> None:
    """CLIENTS clients submit `total` jobs between them, each on a connection of its own."""
    async with anyio.create_task_group() as tg:
        for _ in range(CLIENTS):
            http = client(endpoint, connections=1)
            tg.start_soon(_submit_with, ctx, http, project, total // CLIENTS)


async def _submit_with(
    ctx: BenchContext, http: httpx.AsyncClient, project: str, count: int
) -> None:
    async with http:
        await _submit(ctx, http, project, count)


async def run_healthz(ctx: BenchContext) -> Result:
    total = ctx.sized(80, 400, 2_000)
    project = f"{PROJECT}-healthz-{int(time.time())}"
    async with ctx.broker("healthz", mode="split", slots=DRAIN_SLOTS) as (http, broker):
        endpoint = ctx.endpoint(broker)
        async with client(endpoint, connections=1) as probe:
            idle = await _probe_for(probe, IDLE_PROBE_S)
            busy: list[float] = []
            stop = anyio.Event()
            began = time.perf_counter()
            async with anyio.create_task_group() as tg:
                tg.start_soon(_probe, probe, busy, stop)
                await _load(ctx, endpoint, project, total)
                drained = await wait_drained(ctx, http, project, total)
                stop.set()
            seconds = time.perf_counter() - began
            draining = await _probe_a_drain(ctx, http, probe, ctx.sized(100, 1_000, 5_000))
    result = _result(idle, busy, total if drained else 0, seconds, ctx.db_backend)
    _add_drain(result, draining)
    return result


async def _probe_a_drain(
    ctx: BenchContext, http: httpx.AsyncClient, probe: httpx.AsyncClient, count: int
) -> tuple[list[float], float | None]:
    """/healthz while `count` jobs sent in one apply drain; its times, and the jobs a
    second (apply sent -> the last finished_at; None when they did not drain in time)."""
    project = f"{PROJECT}-healthz-drain-{int(time.time())}"
    docs = [job_doc(f"drain-{i}", project=project) for i in range(count)]
    samples: list[float] = []
    stop = anyio.Event()
    async with anyio.create_task_group() as tg:
        tg.start_soon(_probe, probe, samples, stop)
        sent = time.time()
        await http.post(routes.APPLY.url(), json={"documents": docs}, timeout=600)
        drained = await wait_drained(ctx, http, project, count)
        stop.set()
    if not drained:
        return samples, None
    params = {"project": project, "phase": ["Succeeded", "Failed"]}
    listed = await http.get(routes.LIST_JOBS.url(), params=params, timeout=120)
    last = max(parse_ts(j["status"]["finished_at"]) for j in listed.json()["items"])
    return samples, rate(count, last - sent)


def _add_drain(result: Result, draining: tuple[list[float], float | None]) -> None:
    samples, per_s = draining
    p50, p99 = ms(percentile(samples, 50)), ms(percentile(samples, 99))
    result.extra |= {"drain_per_s": per_s, "drain_healthz_p50_ms": p50, "drain_healthz_p99_ms": p99}
    result.target += f"; drain >= {TARGET_DRAIN_PER_S:.0f}/s with p99 <= {TARGET_P99_MS:.0f} ms"
    result.met = bool(
        result.met
        and per_s is not None
        and per_s >= TARGET_DRAIN_PER_S
        and (p99 or 0) <= TARGET_P99_MS
    )
    result.details.append(
        f"then one apply drained at {per_s} jobs/s; /healthz during it p50 {p50} ms, p99 {p99} ms"
    )


def _result(
    idle: list[float], busy: list[float], drained: int, seconds: float, backend: str
) -> Result:
    result = Result("healthz", n=len(busy), per_s=rate(drained, seconds))
    result.latencies(busy)
    result.target = f"p99 <= {TARGET_P99_MS:.0f} ms"
    result.met = drained > 0 and (result.p99_ms or 0) <= TARGET_P99_MS
    idle_p50, idle_p99 = ms(percentile(idle, 50)), ms(percentile(idle, 99))
    result.extra = {"store": backend, "idle_p50_ms": idle_p50, "idle_p99_ms": idle_p99}
    result.notes = (
        f"GET /healthz every {PROBE_EVERY_S * 1000:.0f} ms while {CLIENTS} clients submit "
        f"jobs and they drain ({backend}); per_s: jobs submitted and drained a second"
    )
    result.details = [f"idle: p50 {idle_p50} ms, p99 {idle_p99} ms over {len(idle)} probes"]
    if not drained:
        result.details.append("stopped at the time budget before the jobs drained")
    return result
