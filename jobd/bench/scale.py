"""Many workers on one broker: simulated agents inside the bench process.

Each simulated worker does what a real agent does on the wire and nothing else: it
registers, heartbeats every 5 s, long-polls the watch for jobs bound to it and reports
each one started and complete at once. Jobs are then submitted one at a time; the
figure is create-request-sent -> the bound worker received the Scheduled change, timed
on this process's monotonic clock. Each worker has an HTTP client of its own, as each
host of a fleet would.
"""

from __future__ import annotations

import contextlib
import signal
import time
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.abc
import httpx

from jobd.bench.calls import create_job, job_doc
from jobd.bench.context import BenchContext
from jobd.bench.harness import BrokerError, Endpoint, client, raise_open_file_limit
from jobd.bench.stats import Result, Stopwatch, ms, percentile
from jobd.wire import routes

__all__ = ["run_scale"]

TARGET_P50_MS = 20.0
TARGET_P99_MS = 100.0
HEARTBEAT_S = 5.0
_WATCH_S = 30


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

    def arrived(self, job: int) -> anyio.Event:
        return self.arrivals.setdefault(job, anyio.Event())

    def receive(self, job: int, at: float) -> None:
        self.received.setdefault(job, at)
        self.arrived(job).set()


@dataclass
class SimWorker:
    name: str
    http: httpx.AsyncClient
    fleet: Fleet
    revision: int = 0
    running: set[int] = field(default_factory=set)

    async def register(self) -> None:
        body = {
            "spec": {"slots": 1, "gpus": [], "lease_duration_s": 15},
            "hostname": "sim",
            "runner": "sim",
        }
        resp = await self.http.put(routes.REGISTER_WORKER.url(name=self.name), json=body)
        self.revision = int(resp.json()["revision"])

    async def watch_forever(self, tg: anyio.abc.TaskGroup) -> None:
        params: dict[str, Any] = {"worker": self.name, "timeout": _WATCH_S}
        while True:
            params["since"] = self.revision
            resp = await self.http.get(routes.WATCH.url(), params=params)
            now = time.perf_counter()
            body = resp.json()
            for change in body["changes"]:
                self._on_change(change, now, tg)
            self.revision = max(self.revision, int(body["revision"]))

    def _on_change(self, change: dict[str, Any], now: float, tg: anyio.abc.TaskGroup) -> None:
        job = change["object"]
        status, job_id = job["status"], int(job["metadata"]["id"])
        mine = status.get("worker") == self.name and change["op"] != "DELETED"
        if mine and status["phase"] == "Scheduled" and job_id not in self.running:
            self.running.add(job_id)
            self.fleet.receive(job_id, now)
            tg.start_soon(self._run, job_id)

    async def _post(self, path: str, body: dict[str, Any]) -> None:
        """POST once more when the connection dropped under us, as the real agent retries.

        uvicorn closes a connection idle for 5 s, and a heartbeat every 5 s can race that.
        """
        try:
            await self.http.post(path, json=body)
        except httpx.TransportError:
            self.fleet.retries += 1
            await self.http.post(path, json=body)

    async def _run(self, job_id: int) -> None:
        body = {"worker": self.name}
        try:
            await self._post(routes.REPORTS["started"].url(job_id=job_id), body)
            await self._post(routes.REPORTS["complete"].url(job_id=job_id), body | {"exit_code": 0})
        except BrokerError:
            self.fleet.failures += 1
        finally:
            self.running.discard(job_id)

    async def heartbeat_forever(self, first_after_s: float) -> None:
        await anyio.sleep(first_after_s)
        while True:
            began = time.perf_counter()
            body = {"running": sorted(self.running)}
            try:
                await self._post(routes.HEARTBEAT.url(name=self.name), body)
                self.fleet.heartbeats.append(time.perf_counter() - began)
            except BrokerError:
                self.fleet.failures += 1
            took = time.perf_counter() - began
            await anyio.sleep(max(0.0, HEARTBEAT_S - took))


async def _register_all(ctx: BenchContext, sims: list[SimWorker]) -> float:
    """Register every worker, 32 at a time; returns the seconds it took."""
    began = time.perf_counter()
    pending = iter(sims)

    async def register_some() -> None:
        for sim in pending:
            await sim.register()

    async with anyio.create_task_group() as tg:
        for _ in range(32):
            tg.start_soon(register_some)
    ctx.progress.step("registered", len(sims), len(sims))
    return time.perf_counter() - began


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


async def _drive(ctx: BenchContext, http: httpx.AsyncClient, endpoint: Endpoint) -> Result:
    workers, jobs, min_s = ctx.sized((20, 15, 1.5), (200, 100, 6.0), (1000, 300, 12.0))
    fleet = Fleet()
    async with contextlib.AsyncExitStack() as stack:
        sims = [
            SimWorker(f"sim-{i:04d}", await stack.enter_async_context(client(endpoint, 4)), fleet)
            for i in range(workers)
        ]
        fleet.register_s = await _register_all(ctx, sims)
        watch = Stopwatch()
        async with anyio.create_task_group() as tg:
            for i, sim in enumerate(sims):
                tg.start_soon(sim.watch_forever, tg)
                # Phases spread over the whole interval, as agents started at different
                # moments have: a fleet renewing in lockstep is not what a broker meets.
                tg.start_soon(sim.heartbeat_forever, i * HEARTBEAT_S / workers)
            await anyio.sleep(1.0)  # the watches park, the first heartbeats go out
            latencies = await _submit(ctx, http, fleet, jobs)
            await anyio.sleep(max(0.0, min_s - watch.elapsed()))
            fleet.client_cpu_pct = watch.cpu_pct()
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
        "failures": fleet.failures,
        "retries": fleet.retries,
    }
    result.notes = f"{workers} simulated workers; create sent -> Scheduled change seen"
    result.details = [
        f"heartbeat: p50 {result.extra['heartbeat_p50_ms']} ms, p99 "
        f"{result.extra['heartbeat_p99_ms']} ms over {len(fleet.heartbeats)}; "
        f"{workers} registered in {fleet.register_s:.2f} s; {fleet.failures} failures, "
        f"{fleet.retries} retries on dropped connections; "
        f"bench client CPU {fleet.client_cpu_pct}%"
    ]
    return result


async def run_scale(ctx: BenchContext) -> Result:
    ctx.require_own_broker("it needs a broker with no real worker")
    ctx.progress.step(f"open-file limit {raise_open_file_limit()}")
    async with ctx.broker("scale") as (http, broker):
        assert broker is not None
        try:
            return await _drive(ctx, http, broker.endpoint)
        finally:
            # A graceful stop would wait for the parked watches to time out; nothing to keep.
            broker.stop(signal.SIGKILL)
