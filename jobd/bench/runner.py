"""`jobd bench`: run the chosen scenarios one after another, then report.

Each scenario runs in its own event loop under a wall-clock budget, in a shared
temporary directory that is removed at the end. Progress goes to stderr; results go to
stdout, as a rich table or, with `--json`, as one JSON object per scenario and line (the
table then goes to stderr). A scenario that fails is reported with its error and makes
the exit code 1; a missed target does not.

Figures that do not apply are null: `per_s` for the latency scenarios (dispatch,
preempt, scale) and for reconcile, whose p50/p99 are CPU milliseconds. `cli` reports two
things at once: `job get`'s wall time as p50/p99 and `job apply -f`'s documents a second
as per_s.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import cast

from rich.console import Console
from rich.table import Table
from rich.text import Text

from jobd.bench.api import run_apply, run_submit
from jobd.bench.cli import run_cli
from jobd.bench.context import BenchContext, Size, Skipped
from jobd.bench.databases import bench_db
from jobd.bench.dispatch import run_dispatch, run_drain
from jobd.bench.election import run_election
from jobd.bench.footprint import run_footprint
from jobd.bench.gangs import run_gang
from jobd.bench.harness import Endpoint, leading_broker
from jobd.bench.loaded import run_healthz
from jobd.bench.notify import run_notify
from jobd.bench.placement import run_placement, run_placement_fair
from jobd.bench.preempt import run_preempt
from jobd.bench.progress import Progress
from jobd.bench.reconcile import run_reconcile
from jobd.bench.scale import run_scale
from jobd.bench.stats import Result, Stopwatch
from jobd.wire.failover import split_servers

__all__ = ["OPT_IN", "SCENARIOS", "run_bench"]

Scenario = Callable[[BenchContext], Awaitable[Result]]

SCENARIOS: dict[str, Scenario] = {
    "submit": run_submit,
    "apply": run_apply,
    "dispatch": run_dispatch,
    "drain": run_drain,
    "preempt": run_preempt,
    "scale": run_scale,
    "reconcile": run_reconcile,
    "placement": run_placement,
    "cli": run_cli,
    "footprint": run_footprint,
}
# Run only when named (`--scenario healthz`), not in the default set.
OPT_IN: dict[str, Scenario] = {
    "healthz": run_healthz,
    "election": run_election,
    "notify": run_notify,
    "placement-fair": run_placement_fair,
    "gang": run_gang,
}


def run_bench(
    server: str | None,
    as_json: bool,
    scenarios: list[str],
    size: str,
    concurrency: int = 32,
    stored: int = 0,
) -> int:
    """Run the scenarios (all when none are named); the process exit code."""
    names = scenarios or list(SCENARIOS)
    unknown = [n for n in names if n not in SCENARIOS | OPT_IN]
    if unknown:
        have = ", ".join([*SCENARIOS, *OPT_IN])
        print(
            f"jobd bench: no scenario {', '.join(unknown)} (have: {have})",
            file=sys.stderr,
        )
        return 2
    if server and stored:
        print(
            "jobd bench: --stored fills the stores of brokers it starts, not --server's",
            file=sys.stderr,
        )
        return 2
    try:
        endpoint = _endpoint(server) if server else None
    except ValueError as exc:  # not a list of broker addresses
        print(f"jobd bench: --server: {exc}", file=sys.stderr)
        return 2
    if server and endpoint is None:
        print("jobd bench: no token for --server: set JOBD_TOKEN", file=sys.stderr)
        return 2
    results = _run_all(names, cast(Size, size), concurrency, endpoint, as_json, stored)
    out = sys.stderr if as_json else sys.stdout
    _render(Console(file=out, width=None if out.isatty() else 120), results)
    return 1 if any(r.error for r in results) else 0


def _endpoint(server: str) -> Endpoint | None:
    """The broker `--server` names to measure (of several, the leader) and its token."""
    from jobd.discovery import default_token

    token = default_token(server)
    return Endpoint(leading_broker(split_servers(server)), token) if token else None


def _run_all(
    names: list[str],
    size: Size,
    concurrency: int,
    endpoint: Endpoint | None,
    as_json: bool,
    stored: int = 0,
) -> list[Result]:
    results = []
    with tempfile.TemporaryDirectory(prefix="jobd-bench-") as tmp, Progress() as progress:
        for name in names:
            ctx = BenchContext(size, Path(tmp) / name, progress, concurrency, endpoint, stored)
            ctx.db = bench_db()
            result = _run_one(name, ctx)
            if stored and name != "reconcile":  # reconcile fills its stores itself
                result.extra["stored"] = stored
            if ctx.store is not None:  # which store the figures were taken on
                result.extra.setdefault("store", ctx.store)
            results.append(result)
            if as_json:
                print(json.dumps(result.as_json()), flush=True)
    return results


def _run_one(name: str, ctx: BenchContext) -> Result:
    ctx.begin(name)
    watch = Stopwatch()
    try:
        result = asyncio.run(_bounded((SCENARIOS | OPT_IN)[name], ctx))
    except Skipped as exc:
        result = Result(name, skipped=True, notes=str(exc))
    except Exception as exc:  # a benchmark reports its failures, it does not crash on them
        result = Result(name, error=_describe(exc))
    result.size, result.seconds = ctx.size, watch.elapsed()
    ctx.progress.end(_summary(result))
    return result


def _describe(exc: BaseException) -> str:
    """One line: the first real error inside any exception groups, and how many there were."""
    leaves: list[BaseException] = []

    def walk(e: BaseException) -> None:
        if isinstance(e, BaseExceptionGroup):
            for inner in e.exceptions:
                walk(inner)
        else:
            leaves.append(e)

    walk(exc)
    first = leaves[0] if leaves else exc
    more = f" (and {len(leaves) - 1} more)" if len(leaves) > 1 else ""
    text = str(first) or repr(first)
    return f"{type(first).__name__}: {text.splitlines()[0] if text else ''}{more}"


async def _bounded(scenario: Scenario, ctx: BenchContext) -> Result:
    async with asyncio.timeout(ctx.budget_s):
        return await scenario(ctx)


def _summary(r: Result) -> str:
    if r.error:
        return f"error: {r.error}"
    if r.skipped:
        return r.notes
    return (
        f"n={r.n} per_s={_num(r.per_s)} p50={_num(r.p50_ms)} ms p99={_num(r.p99_ms)} ms "
        f"met={_met(r)} ({r.seconds:.1f} s)"
    )


def _num(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.2f}"


def _met(r: Result) -> str:
    if r.error:
        return "error"
    if r.skipped or r.met is None:
        return "-"
    return "yes" if r.met else "no"


_MET_STYLE = {"yes": "green", "no": "red", "error": "bold red"}


def _render(console: Console, results: list[Result]) -> None:
    """The table of figures, then each scenario's notes and details below it."""
    size = results[0].size if results else ""
    table = Table(title=f"jobd bench ({size})", title_justify="left")
    for col in ("scenario", "n", "per s", "p50 ms", "p99 ms"):
        table.add_column(col, justify="left" if col == "scenario" else "right")
    table.add_column("target")
    table.add_column("met")
    for r in results:
        met = _met(r)
        table.add_row(
            r.scenario,
            str(r.n),
            _num(r.per_s),
            _num(r.p50_ms),
            _num(r.p99_ms),
            r.target,
            Text(met, style=_MET_STYLE.get(met, "")),
        )
    console.print(table)
    for r in results:
        for line in [r.error or r.notes, *r.details]:
            if line:
                console.print(Text(f"  {r.scenario}: {line}"))
