"""`jobd bench --size tiny --json` runs every scenario against real subprocesses.

Each scenario prints exactly one JSON line with the common figures. `per_s` is null
where a rate does not apply: the latency scenarios (dispatch, preempt, scale) and
reconcile, whose p50/p99 are CPU milliseconds; every other figure is a number. Targets
may be missed on a slow machine (`met: false`), which still exits 0.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

SCENARIOS = [
    "submit",
    "apply",
    "dispatch",
    "drain",
    "preempt",
    "scale",
    "reconcile",
    "placement",
    "cli",
    "footprint",
]
RATE_NOT_APPLICABLE = {"dispatch", "preempt", "scale", "reconcile", "placement"}
# Memory, not time: no rate nor latency (their figures are checked below).
MEMORY = {"footprint"}


@pytest.fixture(scope="module")
def bench_run(tmp_path_factory: pytest.TempPathFactory) -> subprocess.CompletedProcess[str]:
    home = tmp_path_factory.mktemp("home")
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBD_")}
    env |= {"HOME": str(home), "XDG_DATA_HOME": str(home / "data"), "TMPDIR": str(home)}
    return subprocess.run(
        [sys.executable, "-m", "jobd", "bench", "--size", "tiny", "--json"],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
    )


def _lines(run: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in run.stdout.splitlines() if line.strip()]


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def test_bench_exits_zero(bench_run: subprocess.CompletedProcess[str]) -> None:
    assert bench_run.returncode == 0, bench_run.stdout + bench_run.stderr


def test_each_scenario_prints_one_json_line(bench_run: subprocess.CompletedProcess[str]) -> None:
    assert [line["scenario"] for line in _lines(bench_run)] == SCENARIOS, bench_run.stderr


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_scenario_reports_its_figures(
    bench_run: subprocess.CompletedProcess[str], scenario: str
) -> None:
    (line,) = [x for x in _lines(bench_run) if x["scenario"] == scenario]
    assert "error" not in line, line["error"]
    assert line["n"] > 0 and isinstance(line["n"], int)
    assert isinstance(line["met"], bool) and line["size"] == "tiny"
    if scenario in MEMORY:
        assert line["per_s"] is None and line["p50_ms"] is None and line["p99_ms"] is None
        return
    assert _is_number(line["p50_ms"]) and _is_number(line["p99_ms"])
    assert line["p50_ms"] <= line["p99_ms"]
    if scenario in RATE_NOT_APPLICABLE:
        assert line["per_s"] is None
    else:
        assert _is_number(line["per_s"]) and line["per_s"] > 0


def test_submitted_jobs_survive_a_killed_broker(
    bench_run: subprocess.CompletedProcess[str],
) -> None:
    (line,) = [x for x in _lines(bench_run) if x["scenario"] == "submit"]
    assert line["durable"] is True


def test_the_cli_scenario_reports_get_help_and_python_beside_apply(
    bench_run: subprocess.CompletedProcess[str],
) -> None:
    """`cli`: p50/p99 are the wall times of `job get` of 200 jobs; beside them the wall and
    CPU times of `job get` of 3, `job --help` and `python -c pass`; per_s is `job apply -f`'s
    documents a second."""
    (line,) = [x for x in _lines(bench_run) if x["scenario"] == "cli"]
    assert line["n"] == 5 and line["apply_documents"] == 300
    assert (line["get_jobs"], line["get_few_jobs"]) == (200, 3)
    for name in ("get", "get_few", "help", "python"):
        for what in ("p50_ms", "p99_ms", "cpu_p50_ms", "cpu_p99_ms"):
            assert _is_number(line[f"{name}_{what}"]), f"{name}_{what}"
        assert line[f"{name}_p50_ms"] <= line[f"{name}_p99_ms"]
    assert line["get_p50_ms"] == pytest.approx(line["p50_ms"], abs=0.01)
    assert line["python_cpu_p50_ms"] < line["get_cpu_p50_ms"]  # it does more than start
    assert line["python_cpu_p50_ms"] < line["help_cpu_p50_ms"]
    assert line["get_over_python_ms"] == pytest.approx(
        line["p50_ms"] - line["python_p50_ms"], abs=0.02
    )
    assert line["per_s"] == pytest.approx(300 / line["apply_s"], rel=0.01)


def test_the_footprint_scenario_measures_the_worker_and_all_it_keeps(
    bench_run: subprocess.CompletedProcess[str],
) -> None:
    """Idle and after the drain: the agent and the serving shim it keeps warm; a running
    job's shim on its own. Each sum is the sum of the processes listed."""
    (line,) = [x for x in _lines(bench_run) if x["scenario"] == "footprint"]
    for moment in ("idle", "after_drain"):
        figures = line[moment]
        roles = [p["role"] for p in figures["each"]]
        assert roles[0] == "agent" and figures["processes"] == len(roles)
        for key in ("rss_mib", "pss_mib", "uss_mib"):
            total = sum(p[key] for p in figures["each"])
            assert figures[key] == pytest.approx(total, abs=0.1 * len(roles)), key
            assert all(p["uss_mib"] <= p["pss_mib"] <= p["rss_mib"] for p in figures["each"])
    for moment in ("idle", "after_drain"):  # no pool process: the agent starts its shims
        assert {p["role"] for p in line[moment]["each"]} == {"agent", "shim"}
    shim = line["running_shim"]
    assert shim["role"] == "shim" and 0 < shim["uss_mib"] <= shim["pss_mib"] <= shim["rss_mib"]
    met_each = line["met_each"]
    assert set(met_each) == {"idle", "after_drain", "running_shim"}
    assert line["met"] == all(met_each.values())


def test_scenarios_run_on_a_store_with_a_history(tmp_path: Any) -> None:
    """`--stored N`: each broker starts on a store already holding N jobs."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBD_")}
    env |= {"HOME": str(tmp_path), "TMPDIR": str(tmp_path)}
    argv = [sys.executable, "-m", "jobd", "bench", "--size", "tiny", "--json"]
    run = subprocess.run(
        [*argv, "--stored", "2000", "--scenario", "submit", "--scenario", "apply"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    lines = _lines(run)
    assert [line["scenario"] for line in lines] == ["submit", "apply"]
    assert all("error" not in line and line["stored"] == 2000 for line in lines), lines
    assert lines[0]["durable"] is True  # the history does not hide a lost create
    refused = subprocess.run(
        [*argv, "--stored", "5", "--server", "http://127.0.0.1:9"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert refused.returncode == 2 and "--stored" in refused.stderr
