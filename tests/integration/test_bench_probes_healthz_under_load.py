"""`jobd bench --scenario healthz` (opt-in) reports /healthz under load, and idle.

Its figures are the common ones (`p50_ms`, `p99_ms` of /healthz while clients submit and
the jobs drain; `per_s` the jobs a second) with the idle probe's beside them, the same
probe while one apply's jobs drain (`drain_per_s`), and the store it ran on. The default
run does not include it.
"""

from __future__ import annotations

from pathlib import Path

from jobd.bench.runner import OPT_IN, SCENARIOS
from tests.integration.conftest import bench_line


def test_healthz_is_opt_in() -> None:
    assert "healthz" in OPT_IN and "healthz" not in SCENARIOS


def test_the_healthz_scenario_reports_its_figures(tmp_path: Path) -> None:
    line = bench_line(tmp_path, "--scenario", "healthz")
    assert line["scenario"] == "healthz", line
    assert line["n"] > 0 and line["per_s"] > 0 and line["store"] == "sqlite"
    assert 0 < line["p50_ms"] <= line["p99_ms"]
    assert 0 < line["idle_p50_ms"] <= line["idle_p99_ms"]
    # then one apply's jobs drain while /healthz is probed
    assert line["drain_per_s"] > 0
    assert 0 < line["drain_healthz_p50_ms"] <= line["drain_healthz_p99_ms"]
    assert isinstance(line["met"], bool)
