"""From queue to process: `dispatch` (one job on an idle worker) and `drain` (many at once).

Both run `jobd dev`, a broker and a real worker in one process. `dispatch`'s workload is
a Python of the bench's own interpreter (`-I -S`) that prints the time of its first
instruction; the scenario times create-request-sent to that instruction, and in the same
run, alternating with the jobs, a bare spawn of the very same command (subprocess start
to its first instruction): what is above that is jobd's. The first job goes to the
worker as it came up (`first_job_ms`), and counts like the others. `drain` applies n
`true` jobs in one request and times the first create to the last `Succeeded` (the jobs'
`finished_at`, written by the broker).
"""

from __future__ import annotations

import subprocess
import sys
import time
from typing import Any

import anyio
import httpx

from jobd.bench.calls import PROJECT, create_job, job_doc, wait_event
from jobd.bench.context import BenchContext
from jobd.bench.stats import Result, ms, parse_ts, percentile, rate
from jobd.wire import routes

__all__ = ["DRAIN_SLOTS", "FIRST_INSTRUCTION", "run_dispatch", "run_drain", "wait_drained"]

# At most this far above a bare spawn of the same command at p50; p99 at most twice p50.
DISPATCH_OVER_BARE_MS = 3.0
DISPATCH_P99_OVER_P50 = 2.0
DRAIN_TARGET_PER_S = 200.0
DRAIN_SLOTS = 8
IDLE_GAP_S = 0.05
QUIET_S = 0.1  # the bench asks the broker nothing this long after a create
_UNFINISHED = ["Pending", "Scheduled", "Running", "Lost"]
# The workload: its first instruction prints the wall-clock time it ran at.
FIRST_INSTRUCTION = [
    sys.executable,
    "-I",
    "-S",
    "-c",
    "import time; print(repr(time.time()), flush=True)",
]


async def _runner_of(http: httpx.AsyncClient) -> str:
    workers = (await http.get(routes.LIST_WORKERS.url())).json()["items"]
    return ",".join(sorted({str(w["status"].get("runner")) for w in workers})) or "none"


async def _dispatch_once(http: httpx.AsyncClient) -> tuple[int, float]:
    """Create one job and wait until it has finished (the worker is idle again).

    The wait begins once the job has most likely started: a long poll held meanwhile
    would wake at each of the job's commits and query the store, on the loop that in
    `jobd dev` also runs the worker, and so time the bench's own questions too.
    """
    sent = time.time()
    job = await create_job(http, job_doc(command=FIRST_INSTRUCTION))
    await anyio.sleep(QUIET_S)
    await wait_event(http, job, "job_finished")
    await anyio.sleep(IDLE_GAP_S)  # let the worker finish its after-exit reporting
    return job, sent


def bare_spawn() -> float:
    """Seconds from starting FIRST_INSTRUCTION as a subprocess to its first instruction."""
    began = time.time()
    done = subprocess.run(FIRST_INSTRUCTION, capture_output=True, check=True, timeout=30)
    return float(done.stdout) - began


async def _first_instruction(http: httpx.AsyncClient, job: int) -> float:
    """The time the job's workload printed (its output, shipped by the worker)."""
    url, deadline = routes.READ_LOGS.url(job_id=job), time.monotonic() + 10.0
    while time.monotonic() < deadline:
        params: dict[str, Any] = {"follow": "true", "timeout": 5}
        text = (await http.get(url, params=params)).text
        if text.endswith("\n"):
            try:
                return float(text)
            except ValueError:
                raise RuntimeError(f"job {job} printed {text[:200]!r}, not a time") from None
        await anyio.sleep(0.05)  # a finished job's follow answers at once
    raise TimeoutError(f"job {job}'s output did not reach the broker within 10 s")


# The stages of a dispatch, each timed from the create sent (`_start_times`).
_STAGES = ("first", "event", "status", "created", "scheduled")


async def _start_times(http: httpx.AsyncClient, job: int) -> tuple[float, ...]:
    """Its first instruction; when the worker saw its process start (the process_started
    event's `observed_at`: shipped in batches, so waited for); status.started_at; and the
    broker's stamps before its commits: metadata.created_at (the create admitted) and
    status.scheduled_at (the job bound to the worker)."""
    body = (await http.get(routes.GET_JOB.url(job_id=job))).json()
    status = body["status"]
    if status["phase"] != "Succeeded":  # a --server whose workers lack this interpreter
        raise RuntimeError(
            f"job {job} ended {status['phase']} (exit code {status.get('exit_code')}): "
            f"its worker must be able to run {FIRST_INSTRUCTION[0]}"
        )
    event = await wait_event(http, job, "process_started")
    first = await _first_instruction(http, job)
    stamps = (event["observed_at"], status["started_at"], body["metadata"]["created_at"])
    return first, *map(parse_ts, stamps), parse_ts(status["scheduled_at"])


async def run_dispatch(ctx: BenchContext) -> Result:
    total = ctx.sized(15, 200, 1000)
    sent: dict[int, float] = {}
    bare: list[float] = []
    async with ctx.broker("dispatch", mode="dev") as (http, _broker):
        runner = await _runner_of(http)
        for i in range(total):  # the first on the worker as it came up, counted
            if ctx.time_left() <= 0:
                break
            job, at = await _dispatch_once(http)
            sent[job] = at
            bare.append(bare_spawn())  # alternating: a neighbour moves both alike
            ctx.progress.step("dispatching", i + 1, total)
        starts = {job: await _start_times(http, job) for job in sent}
    samples = {
        key: [starts[job][index] - at for job, at in sent.items()]
        for index, key in enumerate(_STAGES)
    }
    return _dispatch_result(samples, bare, runner)


def _dispatch_result(samples: dict[str, list[float]], bare: list[float], runner: str) -> Result:
    result = Result("dispatch", n=len(samples["first"]), per_s=None)
    result.latencies(samples["first"])
    bare_p50, bare_p99 = ms(percentile(bare, 50)), ms(percentile(bare, 99))
    p50, p99 = result.p50_ms or 0.0, result.p99_ms or 0.0
    over = round(p50 - (bare_p50 or 0.0), 3)
    result.target = (
        f"p50 <= bare spawn + {DISPATCH_OVER_BARE_MS:.0f} ms, "
        f"p99 <= {DISPATCH_P99_OVER_P50:.0f} x p50"
    )
    result.met = over <= DISPATCH_OVER_BARE_MS and p99 <= DISPATCH_P99_OVER_P50 * p50
    first_job = ms(samples["first"][0]) if samples["first"] else None
    event = {q: ms(percentile(samples["event"], q)) for q in (50, 99)}
    status = {q: ms(percentile(samples["status"], q)) for q in (50, 99)}
    split = {key: ms(percentile(samples[key], 50)) for key in ("created", "scheduled")}
    result.extra = {
        "runner": runner,
        "bare_spawn_p50_ms": bare_p50,
        "bare_spawn_p99_ms": bare_p99,
        "over_bare_p50_ms": over,
        "first_job_ms": first_job,
        "process_started_p50_ms": event[50],
        "process_started_p99_ms": event[99],
        "started_at_p50_ms": status[50],
        "started_at_p99_ms": status[99],
        "created_at_p50_ms": split["created"],
        "scheduled_at_p50_ms": split["scheduled"],
    }
    result.notes = (
        "create sent -> the workload's first instruction (python -I -S), beside a bare "
        "spawn of the same command"
    )
    result.details = [
        f"bare spawn: p50 {bare_p50} ms, p99 {bare_p99} ms; over it at p50: {over} ms; "
        f"first job on the fresh worker: {first_job} ms",
        f"to the worker's process_started: p50 {event[50]} ms, p99 {event[99]} ms; "
        f"to status.started_at: p50 {status[50]} ms, p99 {status[99]} ms; runner {runner}",
        f"the broker's stamps at p50: created_at {split['created']} ms, "
        f"scheduled_at {split['scheduled']} ms",
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
