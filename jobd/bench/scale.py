"""Many workers on one broker: simulated agents inside the bench process.

Each simulated worker does what a real agent does on the wire and nothing else, through
the same wire code: it registers, heartbeats every 5 s (the jobs it runs and their
attempts), follows the jobs bound to it with the wire's informer (list, then long-poll
the watch) and reports each one started and complete at once, in the agent's batches
(`jobd.wire.reports`) fenced by the job's attempt. Jobs are then submitted one at a
time; the figure is create-request-sent -> the bound worker received the Scheduled
change, timed on this process's monotonic clock. Each worker has an HTTP client of its
own (the wire's `AsyncClient`, as the agent's), as each host of a fleet would, for its
watch and reports; its heartbeats, the fleet's most frequent request (200 a second from
1,000 workers), go over a keep-alive connection of its own (bench/wire.py: the same call,
without httpx, which cost this process three times the broker's CPU per heartbeat).

Beside the client-side figures it reports what tells them apart (bench/served.py): the
broker's own time per heartbeat (its /metrics), the broker's CPU, and how late this
process's loop ran. When the loop here is late, the heartbeat figure is the bench's.
"""

from __future__ import annotations

import contextlib
import signal
import time
import uuid
from dataclasses import dataclass, field
from functools import partial
from typing import TypeVar

import anyio
import anyio.abc
import httpx

from jobd.api.models import WorkerSpec
from jobd.bench.calls import create_job, job_doc
from jobd.bench.collector import paused
from jobd.bench.context import BenchContext
from jobd.bench.harness import BrokerProcess, raise_open_file_limit, wire_client
from jobd.bench.served import HealthProbe, LoopLag, bucket_percentile, route_buckets
from jobd.bench.stats import Result, Stopwatch, ms, percentile
from jobd.bench.wire import Connection
from jobd.wire import calls, routes
from jobd.wire.answers import ReportResult
from jobd.wire.calls import Call
from jobd.wire.client import ApiError, AsyncClient, BrokerUnreachable
from jobd.wire.informer import AsyncInformer, Delta, JobFilter
from jobd.wire.models import Heartbeat, Registration
from jobd.wire.reports import BatchedReport, ReportBatcher

__all__ = ["run_scale"]

TARGET_P50_MS = 20.0
TARGET_P99_MS = 100.0
HEARTBEAT_S = 5.0
T = TypeVar("T")


@dataclass
class Fleet:
    """What the simulated workers observed, shared with the submitter."""

    received: dict[int, float] = field(default_factory=dict)
    arrivals: dict[int, anyio.Event] = field(default_factory=dict)
    heartbeats: list[float] = field(default_factory=list)
    failures: int = 0
    retries: int = 0
    register_s: float = 0.0
    client_cpu_pct: float = 0.0
    broker_cpu_pct: float | None = None
    # The broker's own time per heartbeat (its /metrics histogram), and how late the
    # bench's loop ran: which of the two the heartbeat figure is made of.
    served_p50_s: float | None = None
    served_p99_s: float | None = None
    lag: LoopLag = field(default_factory=LoopLag)
    health: HealthProbe | None = None

    def arrived(self, job: int) -> anyio.Event:
        return self.arrivals.setdefault(job, anyio.Event())

    def receive(self, job: int, at: float) -> None:
        self.received.setdefault(job, at)
        self.arrived(job).set()


@dataclass
class SimWorker:
    """One simulated agent: the production agent's wire paths, without processes."""

    name: str
    client: AsyncClient
    fleet: Fleet
    beats: Connection  # the heartbeats' own connection
    running: dict[int, int] = field(default_factory=dict)  # job -> attempt
    informer: AsyncInformer | None = None
    reports: ReportBatcher = field(init=False)
    run: str = field(default_factory=lambda: uuid.uuid4().hex)  # its batches' delivery run

    def __post_init__(self) -> None:
        self.reports = ReportBatcher(self._send_reports)

    async def register(self) -> None:
        spec = WorkerSpec(slots=1, gpus=[], lease_duration_s=15)
        body = Registration(spec=spec, hostname="sim", runner="sim")
        await self._send(calls.register_worker(self.name, body))
        bound = JobFilter(worker=self.name)
        self.informer = AsyncInformer(self.client, bound, every_listed=True, on_error=self._failed)

    async def watch_forever(self, tg: anyio.abc.TaskGroup) -> None:
        assert self.informer is not None, "register first"
        await self.informer.run(partial(self._on_change, tg))

    def _on_change(self, tg: anyio.abc.TaskGroup, delta: Delta) -> None:
        job = delta.object
        status, job_id = job["status"], int(job["metadata"]["id"])
        mine = status.get("worker") == self.name and delta.op != "DELETED"
        if mine and status["phase"] == "Scheduled" and job_id not in self.running:
            self.running[job_id] = attempt = int(status.get("attempt") or 0)
            self.fleet.receive(job_id, time.perf_counter())
            tg.start_soon(self._run, job_id, attempt)

    async def _run(self, job_id: int, attempt: int) -> None:
        """Report the job started and complete, fenced by its attempt, as the agent does."""
        try:
            await self.reports.report(job_id, "started", attempt, checkpoint_dir=f"/sim/{job_id}/")
            await self.reports.report(job_id, "complete", attempt, exit_code=0)
        except (ApiError, BrokerUnreachable):
            self.fleet.failures += 1
        finally:
            self.running.pop(job_id, None)

    async def _send_reports(self, number: int, reports: list[BatchedReport]) -> list[ReportResult]:
        # Numbered as the agent numbers its batches, so the broker keeps their receipts.
        delivery = {"run": self.run, "seq": number}
        body = {"reports": reports, "delivery": delivery}
        results = await self._send(calls.send_reports(self.name, body))
        self.fleet.failures += sum(r.status >= 300 for r in results)
        return results

    async def _send(self, call: Call[T]) -> T:
        """Send once more when the connection dropped under us, as the real agent retries.

        uvicorn closes a connection idle for 5 s, and a heartbeat every 5 s can race that.
        """
        try:
            return await self.client.run(call)
        except BrokerUnreachable:
            self.fleet.retries += 1
            return await self.client.run(call)

    def _failed(self, _exc: ApiError | BrokerUnreachable) -> None:
        self.fleet.failures += 1  # the informer backs off and lists again

    async def heartbeat_forever(self, first_after_s: float) -> None:
        await anyio.sleep(first_after_s)
        while True:
            began = time.perf_counter()
            body = Heartbeat(running=sorted(self.running), attempts=dict(self.running))
            try:
                await self.beats.run(calls.heartbeat(self.name, body))
                self.fleet.heartbeats.append(time.perf_counter() - began)
            except (ApiError, OSError, EOFError):  # EOFError: the connection cut mid-answer
                self.fleet.failures += 1
            took = time.perf_counter() - began
            await anyio.sleep(max(0.0, HEARTBEAT_S - took))


async def _register_all(
    ctx: BenchContext, sims: list[SimWorker], beating: anyio.abc.TaskGroup
) -> float:
    """Register every worker, 32 at a time; returns the seconds it took.

    Each heartbeats from its registration on, as an agent does: a fleet that waited for
    the last to register would see its first leases run out while a loaded broker was
    still registering the rest, and measure the storm of Lost workers that makes.
    """
    began = time.perf_counter()
    pending = iter(enumerate(sims))

    async def register_some() -> None:
        for i, sim in pending:
            await sim.register()
            # Phases spread over the whole interval, as agents started at different
            # moments have: a fleet renewing in lockstep is not what a broker meets.
            beating.start_soon(sim.heartbeat_forever, i * HEARTBEAT_S / len(sims))

    async with anyio.create_task_group() as tg:
        for _ in range(32):
            tg.start_soon(register_some)
    ctx.progress.step("registered", len(sims), len(sims))
    return time.perf_counter() - began


async def _listed(sims: list[SimWorker]) -> None:
    """Until every worker's informer has listed its jobs (it then watches from there)."""
    for sim in sims:
        assert sim.informer is not None
        await sim.informer.synced.wait()


async def _submit(
    ctx: BenchContext, http: httpx.AsyncClient, fleet: Fleet, total: int
) -> list[float]:
    latencies: list[float] = []
    for i in range(total):
        if ctx.time_left() <= 0:
            break
        sent = time.perf_counter()
        job = await create_job(http, job_doc())
        with anyio.fail_after(10):
            await fleet.arrived(job).wait()
        latencies.append(fleet.received[job] - sent)
        ctx.progress.step("dispatching", i + 1, total)
    return latencies


def _lazy(stack: contextlib.AsyncExitStack, conn: Connection) -> Connection:
    """A connection opened by its first call, closed with the stack: one opened long
    before its first request is closed by the broker's head deadline (10 s)."""
    stack.push_async_exit(conn)
    return conn


async def _drive(ctx: BenchContext, http: httpx.AsyncClient, broker: BrokerProcess) -> Result:
    workers, jobs, min_s = ctx.sized((20, 15, 1.5), (200, 100, 6.0), (1000, 300, 12.0))
    fleet, endpoint = Fleet(), broker.endpoint
    async with contextlib.AsyncExitStack() as stack:
        sims = [
            SimWorker(
                f"sim-{i:04d}",
                await stack.enter_async_context(wire_client(endpoint, 4)),
                fleet,
                _lazy(stack, Connection(endpoint)),
            )
            for i in range(workers)
        ]
        async with anyio.create_task_group() as tg:
            fleet.register_s = await _register_all(ctx, sims, tg)
            watch = Stopwatch()
            for sim in sims:
                tg.start_soon(sim.watch_forever, tg)
            await _listed(sims)  # the fleet's first lists are not what is measured
            await anyio.sleep(1.0)  # the watches park
            fleet.heartbeats.clear()  # those of the start-up are not what is measured
            # A thousand agents share this one process's collector: a collection of
            # the fleet's heap stalls every agent at once, which no fleet of hosts sees
            # (bench/collector.py).
            stack.enter_context(paused())
            tg.start_soon(fleet.lag.run)
            fleet.health = HealthProbe(await stack.enter_async_context(Connection(endpoint)))
            tg.start_soon(fleet.health.run)
            served = await route_buckets(http, routes.HEARTBEAT.method, routes.HEARTBEAT.path)
            broker_cpu, measured = broker.cpu_seconds().get("broker", 0.0), Stopwatch()
            latencies = await _submit(ctx, http, fleet, jobs)
            await anyio.sleep(max(0.0, min_s - watch.elapsed()))
            fleet.client_cpu_pct = watch.cpu_pct()
            used = broker.cpu_seconds().get("broker", 0.0) - broker_cpu
            fleet.broker_cpu_pct = round(100 * used / measured.elapsed(), 1)
            now = await route_buckets(http, routes.HEARTBEAT.method, routes.HEARTBEAT.path)
            fleet.served_p50_s = bucket_percentile(served, now, 50)
            fleet.served_p99_s = bucket_percentile(served, now, 99)
            fleet.retries += sum(sim.beats.reopened for sim in sims)
            tg.cancel_scope.cancel()
    return _result(workers, latencies, fleet)


def _result(workers: int, latencies: list[float], fleet: Fleet) -> Result:
    result = Result("scale", n=len(latencies), per_s=None)
    result.latencies(latencies)
    result.target = f"p50 <= {TARGET_P50_MS:.0f} ms, p99 <= {TARGET_P99_MS:.0f} ms (1000 workers)"
    result.met = (result.p50_ms or 0) <= TARGET_P50_MS and (result.p99_ms or 0) <= TARGET_P99_MS
    result.extra = {
        "workers": workers,
        "heartbeats": len(fleet.heartbeats),
        "heartbeat_p50_ms": ms(percentile(fleet.heartbeats, 50)),
        "heartbeat_p99_ms": ms(percentile(fleet.heartbeats, 99)),
        "register_s": round(fleet.register_s, 3),
        "client_cpu_pct": fleet.client_cpu_pct,
        "broker_cpu_pct": fleet.broker_cpu_pct,
        "broker_heartbeat_p50_ms": ms(fleet.served_p50_s),
        "broker_heartbeat_p99_ms": ms(fleet.served_p99_s),
        "client_lag_p50_ms": ms(fleet.lag.p(50)),
        "client_lag_p99_ms": ms(fleet.lag.p(99)),
        "healthz_p50_ms": ms(fleet.health.p(50)) if fleet.health else None,
        "healthz_p99_ms": ms(fleet.health.p(99)) if fleet.health else None,
        "failures": fleet.failures,
        "retries": fleet.retries,
    }
    result.notes = f"{workers} simulated workers; create sent -> Scheduled change seen"
    result.details = [
        f"heartbeat: p50 {result.extra['heartbeat_p50_ms']} ms, p99 "
        f"{result.extra['heartbeat_p99_ms']} ms over {len(fleet.heartbeats)}; "
        f"{workers} registered in {fleet.register_s:.2f} s; {fleet.failures} failures, "
        f"{fleet.retries} retries on dropped connections; "
        f"bench client CPU {fleet.client_cpu_pct}%",
        f"the broker's own time per heartbeat (its /metrics): p50 "
        f"{result.extra['broker_heartbeat_p50_ms']} ms, p99 "
        f"{result.extra['broker_heartbeat_p99_ms']} ms; broker CPU {fleet.broker_cpu_pct}%; "
        f"the bench's loop late by p50 {result.extra['client_lag_p50_ms']} ms, p99 "
        f"{result.extra['client_lag_p99_ms']} ms; /healthz every 10 ms: p50 "
        f"{result.extra['healthz_p50_ms']} ms, p99 {result.extra['healthz_p99_ms']} ms",
    ]
    return result


async def run_scale(ctx: BenchContext) -> Result:
    ctx.require_own_broker("it needs a broker with no real worker")
    ctx.progress.step(f"open-file limit {raise_open_file_limit()}")
    async with ctx.broker("scale") as (http, broker):
        assert broker is not None
        try:
            return await _drive(ctx, http, broker)
        finally:
            # A graceful stop would wait for the parked watches to time out; nothing to keep.
            broker.stop(signal.SIGKILL)
