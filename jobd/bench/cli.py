"""The `job` command as a user meets it: `cli` times `job get`, `job --help` and `job apply -f`.

All run the installed `job` program as a real subprocess, against `jobd dev` (a broker
and its worker, SQLite), so start-up, imports and rendering are all in the figure.
`job get` of 200 jobs (the target of issue 22), `job get` of 3 (a short look) and
`job --help` are timed `n` times each, in turn with `python -c pass` on the same
interpreter (what any Python program pays before its first line), each with its wall
time and its CPU time (which a busy machine stretches least). The children run with
their bytecode cached, as an installed jobd has it (pip compiles it at install): a
`PYTHONDONTWRITEBYTECODE=1` environment would otherwise have every jobd module compiled
on every run. `job apply -f` of a generated file of many Job documents is timed once,
from the command's start to its exit, and reported as documents a second. The jobs ask
for more GPUs than any worker has, so none runs and only the command, the API and the
store are measured.
"""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx

from jobd.bench.calls import PROJECT, UNRUNNABLE, cancel_all, create_job, job_doc
from jobd.bench.context import BenchContext, Skipped
from jobd.bench.harness import Endpoint
from jobd.bench.stats import Result, percentile, rate
from jobd.wire import routes

__all__ = ["run_cli"]

GET_TARGET_P50_MS = 100.0  # `job get` of GET_JOBS jobs (issue 22)
HELP_TARGET_P50_MS = 60.0
APPLY_TARGET_PER_S = 5000.0
GET_JOBS = 200
_FEW_JOBS = 3  # a short table, as a user's usual look: the figure before issue 22


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


def _env(endpoint: Endpoint, pycache: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBD_")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    # Bytecode written beside the bench's other files, so the source tree stays untouched.
    env["PYTHONPYCACHEPREFIX"] = str(pycache)
    return env | {"JOBD_URL": endpoint.url, "JOBD_TOKEN": endpoint.token}


@dataclass
class _Timed:
    """The runs of each command, by name."""

    runs: dict[str, list[_Run]] = field(default_factory=dict)

    def wall(self, name: str) -> list[float]:
        return [r.wall_s for r in self.runs[name]]

    def cpu(self, name: str) -> list[float]:
        return [r.cpu_s for r in self.runs[name]]


async def _time_commands(commands: dict[str, list[str]], env: dict[str, str], runs: int) -> _Timed:
    """Each command `runs` times, in turn (so a change in the machine's load reaches them
    all alike), after one run of each to warm the file cache and write the bytecode."""
    for argv in commands.values():
        await _run(argv, env)
    timed = _Timed({name: [] for name in commands})
    for _ in range(runs):
        for name, argv in commands.items():
            timed.runs[name].append(await _run(argv, env))
    return timed


def _commands(job: Path, label: str) -> dict[str, list[str]]:
    return {
        "get": [str(job), "get", "-p", PROJECT, "-l", f"{label}"],
        "get_few": [str(job), "get", "-p", PROJECT, "-l", f"{label},cli-few=yes"],
        "help": [str(job), "--help"],
        "python": [sys.executable, "-c", "pass"],
    }


async def _create_listed(http: httpx.AsyncClient, label: str) -> list[int]:
    """GET_JOBS jobs labelled `label`, the first _FEW_JOBS of them also `cli-few=yes`."""
    key, _, value = label.partition("=")
    ids: list[int] = []

    async def create(i: int) -> None:
        labels = {key: value} | ({"cli-few": "yes"} if i < _FEW_JOBS else {})
        doc = job_doc(f"cli-get-{value}-{i}", **UNRUNNABLE)
        doc["metadata"]["labels"] = labels
        ids.append(await create_job(http, doc))

    async with anyio.create_task_group() as tg:
        for i in range(GET_JOBS):
            tg.start_soon(create, i)
    return ids


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
    label = f"cli-run={time.time_ns()}"
    async with ctx.broker("cli", mode="dev") as (http, broker):
        env = _env(ctx.endpoint(broker), ctx.scratch("cli") / "pycache")
        listed = await _create_listed(http, label)
        ctx.progress.step(f"timing job get ({GET_JOBS} and {_FEW_JOBS} jobs), job --help")
        timed = await _time_commands(_commands(job, label), env, runs)
        shown = (await _run(_commands(job, label)["get"], env)).done.stdout
        if len(shown.splitlines()) != GET_JOBS + 1:
            raise RuntimeError(f"job get showed {len(shown.splitlines()) - 1} jobs, not {GET_JOBS}")
        ctx.progress.step(f"timing job apply -f of {count:,} documents")
        apply_s, prefix = await _time_apply(ctx, job, env, count)
        if broker is None:
            await cancel_all(http, listed)
            await _cancel_ours(http, prefix)
    return _result(timed, count, apply_s)


def _result(timed: _Timed, count: int, apply_s: float) -> Result:
    result = Result("cli", n=len(timed.runs["get"]), per_s=rate(count, apply_s))
    result.latencies(timed.wall("get"))
    figures = {
        f"{name}_{what}": value for name in timed.runs for what, value in _figures(timed, name)
    }
    baseline = figures["python_p50_ms"]
    result.target = (
        f"get of {GET_JOBS} jobs p50 <= {GET_TARGET_P50_MS:.0f} ms, --help p50 <= "
        f"{HELP_TARGET_P50_MS:.0f} ms, apply >= {APPLY_TARGET_PER_S:.0f} docs/s"
    )
    result.met = (
        (result.p50_ms or 0) <= GET_TARGET_P50_MS
        and figures["help_p50_ms"] <= HELP_TARGET_P50_MS
        and (result.per_s or 0) >= APPLY_TARGET_PER_S
    )
    result.extra = figures | {
        "get_jobs": GET_JOBS,
        "get_few_jobs": _FEW_JOBS,
        "get_over_python_ms": round(figures["get_p50_ms"] - baseline, 2),
        # Other work on the machine stretches every wall time: say how busy it was.
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "apply_documents": count,
        "apply_s": round(apply_s, 3),
    }
    result.notes = (
        f"`job get` of {GET_JOBS} and of {_FEW_JOBS} jobs and `job --help`, {result.n} times "
        f"each beside `python -c pass`; `job apply -f` of {count:,} documents once; real "
        "subprocesses against jobd dev"
    )
    result.details = [_detail(figures, name, what) for name, what in _SHOWN] + [
        f"load average {result.extra['load_avg_1m']}; job apply -f: {count:,} documents "
        f"in {apply_s:.2f} s"
    ]
    return result


_SHOWN = [
    ("get", f"job get ({GET_JOBS} jobs)"),
    ("get_few", f"job get ({_FEW_JOBS} jobs)"),
    ("help", "job --help"),
    ("python", "python -c pass"),
]


def _figures(timed: _Timed, name: str) -> list[tuple[str, float]]:
    """Milliseconds, to 0.01: p50 and p99 of the wall times, then of the CPU times."""
    wall, cpu = timed.wall(name), timed.cpu(name)
    found = [("p50_ms", wall, 50), ("p99_ms", wall, 99), ("cpu_p50_ms", cpu, 50)]
    found.append(("cpu_p99_ms", cpu, 99))
    return [(what, round(1000 * (percentile(runs, q) or 0.0), 2)) for what, runs, q in found]


def _detail(figures: dict[str, float], name: str, what: str) -> str:
    wall = f"p50 {figures[f'{name}_p50_ms']} / p99 {figures[f'{name}_p99_ms']} ms"
    cpu = f"CPU p50 {figures[f'{name}_cpu_p50_ms']} / p99 {figures[f'{name}_cpu_p99_ms']} ms"
    return f"{what}: {wall} wall, {cpu}"
