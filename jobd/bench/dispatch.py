"""From queue to process: `dispatch` (one job on an idle worker) and `drain` (many at once).

Both run `jobd dev`, a broker and a real worker in one process, with the trivial program
`true` as the workload. `dispatch` times create-request-sent to the worker's own
`process_started` event; `drain` applies n jobs in one request and times the first
create to the last `Succeeded` (the jobs' `finished_at`, written by the broker).
"""

from __future__ import annotations

import time
from typing import Any

import anyio
import httpx

from jobd.bench.calls import PROJECT, create_job, job_doc, wait_event
from jobd.bench.context import BenchContext
from jobd.bench.stats import Result, ms, parse_ts, percentile, rate
from jobd.wire import routes

__all__ = ["DRAIN_SLOTS", "run_dispatch", "run_drain", "wait_drained"]

DISPATCH_TARGET_P50_MS = 20.0
DISPATCH_TARGET_P99_MS = 100.0
DRAIN_TARGET_PER_S = 200.0
DRAIN_SLOTS = 8
IDLE_GAP_S = 0.05
_UNFINISHED = ["Pending", "Scheduled", "Running", "Lost"]


async def _runner_of(http: httpx.AsyncClient) -> str:
    workers = (await http.get(routes.LIST_WORKERS.url())).json()["items"]
    return ",".join(sorted({str(w["status"].get("runner")) for w in workers})) or "none"


async def _dispatch_once(http: httpx.AsyncClient) -> tuple[int, float]:
    """Create one job and wait until it has finished (the worker is idle again)."""
    sent = time.time()
    job = await create_job(http, job_doc())
    await wait_event(http, job, "job_finished")
    await anyio.sleep(IDLE_GAP_S)  # let the worker finish its after-exit reporting
    return job, sent


async def _start_times(http: httpx.AsyncClient, job: int) -> tuple[float, float]:
    """When the worker saw its process start (the process_started event's `observed_at`:
    shipped in batches, so waited for); status.started_at."""
    event = await wait_event(http, job, "process_started")
    status = (await http.get(routes.GET_JOB.url(job_id=job))).json()["status"]
    return parse_ts(event["observed_at"]), parse_ts(status["started_at"])


async def run_dispatch(ctx: BenchContext) -> Result:
    total = ctx.sized(15, 200, 1000)
    sent: dict[int, float] = {}
    async with ctx.broker("dispatch", mode="dev") as (http, _broker):
        runner = await _runner_of(http)
        await _dispatch_once(http)  # first connections, first spawn: not counted
        for i in range(total):
            if ctx.time_left() <= 0:
                break
            job, at = await _dispatch_once(http)
            sent[job] = at
            ctx.progress.step("dispatching", i + 1, total)
        starts = {job: await _start_times(http, job) for job in sent}
    to_event = [starts[job][0] - at for job, at in sent.items()]
    to_status = [starts[job][1] - at for job, at in sent.items()]
    return _dispatch_result(to_event, to_status, runner)


def _dispatch_result(to_event: list[float], to_status: list[float], runner: str) -> Result:
    result = Result("dispatch", n=len(to_event), per_s=None)
    result.latencies(to_event)
    result.target = (
        f"p50 <= {DISPATCH_TARGET_P50_MS:.0f} ms, p99 <= {DISPATCH_TARGET_P99_MS:.0f} ms"
    )
    result.met = (result.p50_ms or 0) <= DISPATCH_TARGET_P50_MS and (
        result.p99_ms or 0
    ) <= DISPATCH_TARGET_P99_MS
    status_p50, status_p99 = ms(percentile(to_status, 50)), ms(percentile(to_status, 99))
    result.extra = {
        "runner": runner,
        "started_at_p50_ms": status_p50,
        "started_at_p99_ms": status_p99,
    }
    result.notes = "create sent -> the worker's process_started event observed_at (ms, truncated)"
    result.details = [
        f"to status.started_at: p50 {status_p50} ms, p99 {status_p99} ms; runner {runner}; "
        "1 warm-up job not counted"
    ]
    return result


async def wait_drained(
    ctx: BenchContext, http: httpx.AsyncClient, project: str, total: int
) -> bool:
    """Until no job of the project is left unfinished or the time budget is spent;
    whether it drained.

    The figure comes from each job's finished_at, not from when this loop notices, so
    it asks only twice a second: each question is a query the measured broker answers.
    """
    params: dict[str, Any] = {"project": project, "phase": _UNFINISHED, "limit": 1}
    began = time.monotonic()
    while ctx.time_left() > 0:
        if not (await http.get(routes.LIST_JOBS.url(), params=params)).json()["items"]:
            return True
        ctx.progress.step(f"draining {total} jobs, {time.monotonic() - began:.0f} s so far")
        await anyio.sleep(0.5)
    return False


async def _finished(http: httpx.AsyncClient, project: str, ids: set[int]) -> list[dict[str, Any]]:
    params: dict[str, Any] = {"project": project, "phase": ["Succeeded", "Failed"]}
    items = (await http.get(routes.LIST_JOBS.url(), params=params, timeout=120)).json()["items"]
    return [doc["status"] for doc in items if doc["metadata"]["id"] in ids]


async def run_drain(ctx: BenchContext) -> Result:
    total = ctx.sized(100, 1_000, 10_000)
    project = f"{PROJECT}-drain-{int(time.time())}"  # this run's jobs only, on any broker
    docs = [job_doc(f"drain-{i}", project=project) for i in range(total)]
    async with ctx.broker("drain", mode="split", slots=DRAIN_SLOTS) as (http, broker):
        cpu_before = broker.cpu_seconds() if broker is not None else {}
        sent = time.time()
        resp = await http.post(routes.APPLY.url(), json={"documents": docs}, timeout=600)
        ids = {int(r["object"]["metadata"]["id"]) for r in resp.json()["results"]}
        drained = await wait_drained(ctx, http, project, total)
        cpu_after = broker.cpu_seconds() if broker is not None else {}
        statuses = await _finished(http, project, ids)
    result = _drain_result(statuses, sent, own=broker is not None)
    # CPU per job in each process: the figure that does not move with a noisy neighbour.
    for role, used in cpu_after.items():
        per_job = (used - cpu_before.get(role, 0.0)) / max(result.n, 1) * 1000
        result.extra[f"{role}_cpu_ms_per_job"] = round(per_job, 2)
    if cpu_after:
        cost = ", ".join(f"{r} {result.extra[f'{r}_cpu_ms_per_job']} ms" for r in cpu_after)
        result.details.append(f"CPU per job: {cost}")
    if not drained:
        result.met = False
        result.details.append(f"stopped at the time budget: {result.n} of {total} finished")
    return result


def _drain_result(statuses: list[dict[str, Any]], sent: float, own: bool) -> Result:
    done = [parse_ts(s["finished_at"]) - sent for s in statuses]
    failed = sum(s["phase"] != "Succeeded" for s in statuses)
    result = Result("drain", n=len(done), per_s=rate(len(done), max(done, default=0)))
    result.latencies(done)
    result.target = f">= {DRAIN_TARGET_PER_S:.0f}/s"
    result.met = (result.per_s or 0) >= DRAIN_TARGET_PER_S and failed == 0
    slots = f"`jobd broker` + `jobd worker --slots {DRAIN_SLOTS}`" if own else "--server's workers"
    result.extra = {"slots": DRAIN_SLOTS if own else None, "failed": failed}
    result.notes = f"n `true` jobs in one apply, {slots}; apply sent -> each finished_at"
    if failed:
        result.details.append(f"{failed} jobs did not succeed")
    return result
