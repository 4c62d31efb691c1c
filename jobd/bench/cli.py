"""The `job` command as a user meets it: `cli` times `job get` and `job apply -f`.

Both run the installed `job` program as a real subprocess, against `jobd dev` (a broker
and its worker, SQLite), so start-up, imports and rendering are all in the figure.
`job get` is timed `n` times, beside `python -c pass` on the same interpreter (what
any Python program pays before its first line); `job apply -f` of a generated file of
many Job documents is timed once, from the command's start to its exit, and reported
as documents a second. The jobs ask for more GPUs than any worker has, so none runs and
only the command, the API and the store are measured.
"""

from __future__ import annotations

import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx

from jobd.bench.calls import PROJECT, UNRUNNABLE, cancel_all, create_job, job_doc
from jobd.bench.context import BenchContext, Skipped
from jobd.bench.harness import Endpoint
from jobd.bench.stats import Result, ms, percentile, rate
from jobd.wire import routes

__all__ = ["run_cli"]

GET_TARGET_P50_MS = 150.0
GET_TARGET_OVER_BASELINE_MS = 130.0
APPLY_TARGET_PER_S = 5000.0
_LISTED_JOBS = 3  # what `job get` shows: a short table, as a user's usual look


def job_program() -> Path:
    """The installed `job` beside this interpreter (a venv's), else the one on PATH."""
    beside = Path(sys.executable).parent / "job"
    if beside.exists():
        return beside
    found = shutil.which("job")
    if found is None:
        raise Skipped("no installed `job` program (pip install jobd)")
    return Path(found)


def manifest_text(prefix: str, count: int) -> str:
    """`count` Job documents as one multi-document YAML file, as a user would write it."""
    docs = []
    for i in range(count):
        docs.append(
            f"apiVersion: jobd/v1\nkind: Job\nmetadata:\n  name: {prefix}-{i}\n"
            f"  project: {PROJECT}\n  labels:\n    sweep: {prefix}\n    team: bench\n"
            f"spec:\n  command: [python, train.py, --seed, '{i}']\n"
            f"  resources:\n    gpus: {UNRUNNABLE['resources']['gpus']}\n"
            f"  env:\n    SEED: '{i}'\n"
        )
    return "---\n".join(docs)


@dataclass
class _Run:
    wall_s: float
    cpu_s: float  # the child's user + system time: what a busy machine inflates least
    done: subprocess.CompletedProcess[str]


def _children_cpu_s() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def _timed(argv: list[str], env: dict[str, str]) -> _Run:
    """One run of argv, its wall time and CPU time (runs are one at a time, so the
    growth of the children's CPU is this child's)."""
    cpu_before, began = _children_cpu_s(), time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    return _Run(time.perf_counter() - began, _children_cpu_s() - cpu_before, done)


async def _run(argv: list[str], env: dict[str, str]) -> _Run:
    """One run of argv; an error if it fails."""
    run = await anyio.to_thread.run_sync(_timed, argv, env)
    if run.done.returncode != 0:
        code, err = run.done.returncode, run.done.stderr[-300:]
        raise RuntimeError(f"{' '.join(argv[:3])} exited {code}: {err}")
    return run


def _env(endpoint: Endpoint) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBD_")}
    return env | {"JOBD_URL": endpoint.url, "JOBD_TOKEN": endpoint.token}


async def _time_get(job: Path, env: dict[str, str], runs: int) -> tuple[list[_Run], list[_Run]]:
    """`job get` and `python -c pass`, alternately, `runs` times each (after one of each
    to warm the file cache)."""
    get = [str(job), "get", "-p", PROJECT]
    baseline = [sys.executable, "-c", "pass"]
    await _run(get, env)
    await _run(baseline, env)
    gets, passes = [], []
    for _ in range(runs):
        gets.append(await _run(get, env))
        passes.append(await _run(baseline, env))
    return gets, passes


async def _time_apply(
    ctx: BenchContext, job: Path, env: dict[str, str], count: int
) -> tuple[float, str]:
    prefix = f"cli-{int(time.time())}"
    manifest = ctx.scratch("cli") / "jobs.yaml"
    manifest.write_text(manifest_text(prefix, count))
    run = await anyio.to_thread.run_sync(_timed, [str(job), "apply", "-f", str(manifest)], env)
    created = run.done.stdout.count(" created\n")
    if run.done.returncode != 0 or created != count:
        raise RuntimeError(f"job apply created {created} of {count}: {run.done.stderr[-300:]}")
    return run.wall_s, prefix


async def _cancel_ours(http: httpx.AsyncClient, prefix: str) -> None:
    """On a --server: cancel the jobs the bench made there."""
    listed = await http.get(routes.LIST_JOBS.url(), params={"project": PROJECT})
    items: list[dict[str, Any]] = listed.json()["items"]
    names = (j["metadata"] for j in items)
    await cancel_all(http, [m["id"] for m in names if str(m["name"]).startswith(prefix)])


async def run_cli(ctx: BenchContext) -> Result:
    runs, count = ctx.sized((5, 300), (20, 10_000), (50, 10_000))
    job = job_program()
    async with ctx.broker("cli", mode="dev") as (http, broker):
        env = _env(ctx.endpoint(broker))
        listed = [
            await create_job(http, job_doc(f"cli-get-{time.time_ns()}-{i}", **UNRUNNABLE))
            for i in range(_LISTED_JOBS)
        ]
        ctx.progress.step("timing job get")
        gets, passes = await _time_get(job, env, runs)
        ctx.progress.step(f"timing job apply -f of {count:,} documents")
        apply_s, prefix = await _time_apply(ctx, job, env, count)
        if broker is None:
            await cancel_all(http, listed)
            await _cancel_ours(http, prefix)
    return _result(gets, passes, count, apply_s)


def _result(gets: list[_Run], passes: list[_Run], count: int, apply_s: float) -> Result:
    result = Result("cli", n=len(gets), per_s=rate(count, apply_s))
    result.latencies([r.wall_s for r in gets])
    baseline = statistics.median(r.wall_s for r in passes)
    over = statistics.median(r.wall_s for r in gets) - baseline
    result.target = (
        f"get p50 <= {GET_TARGET_P50_MS:.0f} ms (<= {GET_TARGET_OVER_BASELINE_MS:.0f} over "
        f"python), apply >= {APPLY_TARGET_PER_S:.0f} docs/s"
    )
    result.met = (
        (result.p50_ms or 0) <= GET_TARGET_P50_MS
        and over * 1000 <= GET_TARGET_OVER_BASELINE_MS
        and (result.per_s or 0) >= APPLY_TARGET_PER_S
    )
    result.extra = {
        "python_p50_ms": ms(baseline),
        "python_p99_ms": ms(percentile([r.wall_s for r in passes], 99)),
        "get_over_python_ms": ms(over),
        "get_cpu_p50_ms": ms(statistics.median(r.cpu_s for r in gets)),
        "python_cpu_p50_ms": ms(statistics.median(r.cpu_s for r in passes)),
        # Other work on the machine stretches every wall time: say how busy it was.
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "apply_documents": count,
        "apply_s": round(apply_s, 3),
    }
    result.notes = (
        f"`job get` {len(gets)} times beside `python -c pass`; `job apply -f` of {count:,} "
        "documents once; real subprocesses against jobd dev"
    )
    cpu, load = result.extra["get_cpu_p50_ms"], result.extra["load_avg_1m"]
    result.details = [
        f"python -c pass p50 {ms(baseline)} ms: job get is {ms(over)} ms over it "
        f"(its CPU p50 {cpu} ms; load average {load})",
        f"job apply -f: {count:,} documents in {apply_s:.2f} s",
    ]
    return result
