"""Preemption latency: decision -> SIGTERM in the workload -> sentinel -> recorded.

The workload is a small Python script that installs `jobd.client`'s preemption handler;
its checkpoint function writes `time.time()` when SIGTERM arrived and again just before
it returns (the helper then prints the sentinel). The decision is the broker's
`auto_preempt` event (committed with the preemption); the end is the broker's
`checkpoint_complete` event. Both are RFC 3339 with milliseconds, truncated.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import anyio
import httpx

from jobd.bench.calls import create_job, job_doc, wait_event
from jobd.bench.context import BenchContext
from jobd.bench.harness import REPO_ROOT
from jobd.bench.stats import Result, ms, parse_ts, percentile
from jobd.wire import routes

__all__ = ["WORKLOAD", "run_preempt"]

TARGET_P50_MS = 50.0

WORKLOAD = '''\
"""jobd bench workload: wait for SIGTERM; time its arrival and the checkpoint's end."""
import sys
import time
from pathlib import Path

from jobd.client import install_preemption_handler

out, ready = Path(sys.argv[1]), Path(sys.argv[2])


def checkpoint(_remaining: float) -> None:
    arrived = time.time()
    with out.open("w") as f:
        f.write(f"{arrived!r}\\n")
        f.write(f"{time.time()!r}\\n")  # the last thing before the helper prints the sentinel


install_preemption_handler(checkpoint)
ready.touch()
while True:
    time.sleep(1)
'''


async def _wait_file(path: Path, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"the workload did not write {path.name} in {timeout_s:.0f} s")
        await anyio.sleep(0.005)


async def _preempt_once(http: httpx.AsyncClient, script: Path, rep: int) -> tuple[float, ...]:
    """(decision -> SIGTERM, request sent -> SIGTERM, sentinel -> recorded), in seconds."""
    out, ready = script.parent / f"ckpt-{rep}.txt", script.parent / f"ready-{rep}"
    command = [sys.executable, str(script), str(out), str(ready)]
    env = {"PYTHONPATH": str(REPO_ROOT)}
    doc = job_doc(command=command, env=env, preemptible=True, checkpoint_grace_s=30)
    job = await create_job(http, doc)
    await _wait_file(ready)
    await wait_event(http, job, "job_started")  # phase Running: preemptible now
    sent = time.time()
    await http.post(routes.PREEMPT_JOB.url(job_id=job))
    decided = parse_ts((await wait_event(http, job, "auto_preempt"))["ts"])
    recorded = parse_ts((await wait_event(http, job, "checkpoint_complete"))["ts"])
    await wait_event(http, job, "job_finished")
    arrived, returned = (float(v) for v in out.read_text().split())
    return arrived - decided, arrived - sent, recorded - returned


async def run_preempt(ctx: BenchContext) -> Result:
    ctx.require_own_broker("the workload must run on a worker of this host")
    total = ctx.sized(3, 20, 100)
    root = ctx.scratch("preempt-workload")
    script = root / "workload.py"
    script.write_text(WORKLOAD)
    samples: list[tuple[float, ...]] = []
    async with ctx.broker("preempt", mode="dev") as (http, _broker):
        for rep in range(total):
            if ctx.time_left() <= 0:
                break
            samples.append(await _preempt_once(http, script, rep))
            ctx.progress.step("preempting", rep + 1, total)
    to_sigterm, from_request, to_record = (list(col) for col in zip(*samples, strict=True))
    return _result(to_sigterm, from_request, to_record)


def _result(to_sigterm: list[float], from_request: list[float], to_record: list[float]) -> Result:
    result = Result("preempt", n=len(to_sigterm), per_s=None)
    result.latencies(to_sigterm)
    sentinel_p50 = ms(percentile(to_record, 50))
    result.extra = {
        "sentinel_p50_ms": sentinel_p50,
        "sentinel_p99_ms": ms(percentile(to_record, 99)),
        "request_to_sigterm_p50_ms": ms(percentile(from_request, 50)),
        "request_to_sigterm_p99_ms": ms(percentile(from_request, 99)),
    }
    result.target = f"p50 <= {TARGET_P50_MS:.0f} ms, both"
    result.met = (result.p50_ms or 0) <= TARGET_P50_MS and (sentinel_p50 or 0) <= TARGET_P50_MS
    result.notes = "auto_preempt event ts -> SIGTERM arrives in the workload"
    result.details = [
        f"sentinel -> checkpoint_complete event: p50 {sentinel_p50} ms, "
        f"p99 {result.extra['sentinel_p99_ms']} ms",
        f"POST /preempt sent -> SIGTERM: p50 {result.extra['request_to_sigterm_p50_ms']} ms, "
        f"p99 {result.extra['request_to_sigterm_p99_ms']} ms (event ts: ms, truncated)",
    ]
    return result
