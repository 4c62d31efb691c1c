"""`jobd bench --scenario notify` (opt-in) compares two real brokers' CPU per job.

One drain on a broker without a notification sink, one on a broker whose `--webhook`
never answers: the JSON line carries both figures and their ratio, and the second
broker's scrape shows its notifications queued behind the held request (so the sink was
there, and held up).
"""

from __future__ import annotations

import json
import subprocess
import sys


def test_the_notify_scenario_reports_both_brokers_and_the_held_queue() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "jobd", "bench", "--scenario", "notify", "--size", "tiny", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    (line,) = [json.loads(li) for li in run.stdout.splitlines() if li.startswith("{")]
    assert line["scenario"] == "notify" and line["n"] == 100
    assert line["broker_cpu_ms_per_job"] > 0
    assert line["silent_webhook_broker_cpu_ms_per_job"] > 0
    assert line["ratio"] > 0 and isinstance(line["met"], bool)
    assert line["webhook_queued"] > 0  # the silent receiver holds the queue up
