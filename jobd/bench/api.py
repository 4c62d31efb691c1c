"""The API and store alone: `submit` (single creates from many clients) and `apply`.

Both run against a broker with no worker, so nothing is scheduled or run and only the
HTTP layer, admission and the store's write path are measured. `submit` then kills the
broker (SIGKILL: no chance to flush anything) and reopens its store to check that every
job it acknowledged is there.
"""

from __future__ import annotations

import contextlib
import json
import signal
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx

from jobd.bench.calls import PROJECT, UNRUNNABLE, cancel_all, job_doc
from jobd.bench.context import BenchContext
from jobd.bench.harness import BrokerError, BrokerProcess, Endpoint
from jobd.bench.stats import Result, Stopwatch, rate
from jobd.bench.wire import Connection
from jobd.store import open_store
from jobd.wire import routes

__all__ = ["run_apply", "run_submit"]

SUBMIT_TARGET_PER_S = 2000.0
APPLY_TARGET_PER_S = 10_000.0


@dataclass
class _Creates:
    """What the concurrent clients of `submit` saw."""

    total: int
    issued: int = 0
    acked: list[int] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    errors: int = 0
    first_error: str = ""
    missing: int | None = None  # acknowledged but not found after a kill
    client_cpu_pct: float = 0.0
    broker_cpu_ms: float | None = None  # broker CPU per acknowledged create

    def failed(self, exc: Exception) -> None:
        self.errors += 1
        self.first_error = self.first_error or f"{type(exc).__name__}: {exc}"


def _spec(ctx: BenchContext) -> dict[str, Any]:
    """Jobs only the API sees: no worker on our own broker; unrunnable on a --server."""
    return UNRUNNABLE if ctx.server is not None else {}


async def _client_loop(ctx: BenchContext, conn: Connection, runs: _Creates) -> None:
    request = conn.prepare("POST", routes.CREATE_JOB.url(), job_doc(**_spec(ctx)))
    while runs.issued < runs.total and ctx.time_left() > 0:
        runs.issued += 1
        began = time.perf_counter()
        try:
            created = await conn.send(request)
        except BrokerError as exc:
            runs.failed(exc)
            continue
        runs.latencies.append(time.perf_counter() - began)
        runs.acked.append(int(created["metadata"]["id"]))
        if len(runs.latencies) % 500 == 0:
            ctx.progress.step("creating", len(runs.latencies), runs.total)


async def _create_concurrently(ctx: BenchContext, endpoint: Endpoint, runs: _Creates) -> float:
    """`ctx.concurrency` clients, each with a connection of its own, creating until done."""
    async with contextlib.AsyncExitStack() as stack:
        conns = [
            await stack.enter_async_context(Connection(endpoint)) for _ in range(ctx.concurrency)
        ]
        watch = Stopwatch()
        async with anyio.create_task_group() as tg:
            for conn in conns:
                tg.start_soon(_client_loop, ctx, conn, runs)
        runs.client_cpu_pct = watch.cpu_pct()
        return watch.elapsed()


def _durable(broker: BrokerProcess, acked: list[int]) -> tuple[bool, int]:
    """Kill the broker, reopen its store: is every acknowledged job there?"""
    broker.stop(signal.SIGKILL)
    store = open_store(broker.db_url)
    try:
        stored = {job.id for job in store.list_jobs(project=PROJECT)}
    finally:
        store.close()
    missing = len(set(acked) - stored)
    return missing == 0, missing


async def run_submit(ctx: BenchContext) -> Result:
    runs = _Creates(ctx.sized(300, 5_000, 20_000))
    durable: bool | None = None
    async with ctx.broker("submit") as (http, broker):
        cpu_before = broker.cpu_seconds() if broker is not None else {}
        elapsed = await _create_concurrently(ctx, ctx.endpoint(broker), runs)
        if broker is not None and runs.acked:
            used = broker.cpu_seconds().get("broker", 0.0) - cpu_before.get("broker", 0.0)
            runs.broker_cpu_ms = round(used / len(runs.acked) * 1000, 3)
        if not runs.acked:
            raise RuntimeError(f"no create was acknowledged; first error: {runs.first_error}")
        if broker is None:
            ctx.progress.step(f"cancelling the {len(runs.acked)} jobs on --server")
            await cancel_all(http, runs.acked)
        else:
            ctx.progress.step("checking durability")
            durable, runs.missing = _durable(broker, runs.acked)
    return _submit_result(ctx, runs, elapsed, durable)


def _submit_result(
    ctx: BenchContext, runs: _Creates, elapsed: float, durable: bool | None
) -> Result:
    result = Result("submit", n=len(runs.acked), per_s=rate(len(runs.acked), elapsed))
    result.latencies(runs.latencies)
    result.target = f">= {SUBMIT_TARGET_PER_S:.0f}/s"
    result.met = (result.per_s or 0) >= SUBMIT_TARGET_PER_S and durable is not False
    result.extra = {
        "concurrency": ctx.concurrency,
        "client_cpu_pct": runs.client_cpu_pct,
        "broker_cpu_ms_per_job": runs.broker_cpu_ms,
        "errors": runs.errors,
        "durable": durable,
        "missing": runs.missing,
    }
    if durable is None:
        result.notes = f"{ctx.concurrency} clients against --server; durability not checked"
        result.details = [f"{runs.errors} errors"]
    else:
        result.notes = f"{ctx.concurrency} clients, no worker; durable = SIGKILL, reopen the store"
        result.details = [f"durable: {durable} ({runs.missing} missing), {runs.errors} errors"]
    result.details.append(f"bench client CPU {runs.client_cpu_pct}% (near 100: client-bound)")
    if runs.broker_cpu_ms is not None:
        result.details.append(f"broker CPU per create: {runs.broker_cpu_ms} ms")
    return result


async def _apply_once(ctx: BenchContext, http: httpx.AsyncClient, prefix: str, count: int) -> float:
    docs = [job_doc(f"{prefix}-{i}", **_spec(ctx)) for i in range(count)]
    # Encoded before the clock starts: the client's JSON is not the broker's work.
    body = json.dumps({"documents": docs}).encode()
    began = time.perf_counter()
    # As `job apply -f` asks: results without the objects (they are for `job diff`).
    resp = await http.post(
        routes.APPLY.url(),
        content=body,
        headers={"content-type": "application/json"},
        params={"objects": "false"},
        timeout=600,
    )
    elapsed = time.perf_counter() - began
    results = resp.json()["results"]
    created = sum(r["action"] == "created" for r in results)
    if created != count:
        raise RuntimeError(f"apply created {created} of {count} jobs")
    if ctx.server is not None:
        listed = await http.get(routes.LIST_JOBS.url(), params={"project": PROJECT})
        ours = {f"{PROJECT}/{d['metadata']['name']}" for d in docs}
        ids = [j["metadata"]["id"] for j in listed.json()["items"] if _ref(j) in ours]
        await cancel_all(http, ids)
    return elapsed


def _ref(job: dict[str, Any]) -> str:
    return f"{job['metadata']['project']}/{job['metadata']['name']}"


async def run_apply(ctx: BenchContext) -> Result:
    count, reps = ctx.sized((300, 2), (5_000, 3), (10_000, 3))
    stamp = int(time.time())
    latencies: list[float] = []
    cpu_ms: list[float] = []
    async with ctx.broker("apply") as (http, broker):
        for rep in range(reps):
            if ctx.time_left() <= 0:
                break
            ctx.progress.step("applying", rep, reps)
            before = broker.cpu_seconds().get("broker", 0.0) if broker is not None else 0.0
            latencies.append(await _apply_once(ctx, http, f"apply-{stamp}-{rep}", count))
            if broker is not None:
                used = broker.cpu_seconds().get("broker", 0.0) - before
                cpu_ms.append(used / count * 1000)
    median = statistics.median(latencies)
    result = Result("apply", n=count, per_s=rate(count, median))
    result.latencies(latencies)
    result.target = f">= {APPLY_TARGET_PER_S:.0f} docs/s"
    result.met = (result.per_s or 0) >= APPLY_TARGET_PER_S
    result.extra = {"requests": len(latencies)}
    if cpu_ms:
        result.extra["broker_cpu_ms_per_doc"] = round(statistics.median(cpu_ms), 3)
        result.details = [f"broker CPU per document: {result.extra['broker_cpu_ms_per_doc']} ms"]
    result.notes = f"one POST /apply of n jobs, {len(latencies)} times; per_s from the median"
    return result
