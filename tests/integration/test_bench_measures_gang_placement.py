"""`jobd bench --scenario gang` (opt-in) places jobs of 2 and 4 nodes on the `placement`
fleet and says their submit-to-bind latency and the scheduler's CPU per gang, beside jobs
of one node placed the same way. The default run does not include it."""

from __future__ import annotations

from pathlib import Path

from jobd.bench.runner import OPT_IN, SCENARIOS
from tests.integration.conftest import bench_line


def test_gang_is_opt_in() -> None:
    assert "gang" in OPT_IN and "gang" not in SCENARIOS


def test_the_gang_scenario_reports_its_figures(tmp_path: Path) -> None:
    line = bench_line(tmp_path, "--scenario", "gang")
    assert line["scenario"] == "gang", line
    assert line["n"] == 30 and line["per_s"] is None and isinstance(line["met"], bool)
    assert 0 < line["p50_ms"] <= line["p99_ms"]
    for nodes in (1, 2, 4):
        for figure in ("bind_ms", "cpu_ms"):
            p50, p99 = line[f"{figure}_{nodes}_nodes_p50"], line[f"{figure}_{nodes}_nodes_p99"]
            assert 0 < p50 <= p99, (nodes, figure)
    assert isinstance(line["cpu_ms_added_per_member_p50"], float)
