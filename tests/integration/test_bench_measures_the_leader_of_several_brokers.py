"""`jobd bench --server a,b,c` takes the comma-separated list the clients take
(wire/failover.py) and measures the broker that leads.

A real `jobd broker` leads (its `/readyz` says `leader`); beside it, listed before it, a
broker that is down and a stand-in standby, a real HTTP server answering every request
307 to the leader, as a standby broker answers writes. The bench's submit scenario runs
against the leader: the standby is asked only whether it leads. A list naming no broker
address is refused (exit 2) naming it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fuzz.broker import TOKEN, Broker, running_broker
from tests.integration.test_clients_ask_brokers_in_turn import DOWN
from tests.integration.test_clients_ask_brokers_in_turn import Broker as StandIn


@pytest.fixture
def leader(tmp_path: Path) -> Iterator[Broker]:
    with running_broker(tmp_path) as broker:
        yield broker


def _bench(servers: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBD_")}
    env |= {"HOME": str(home), "TMPDIR": str(home), "JOBD_TOKEN": TOKEN}
    argv = [sys.executable, "-m", "jobd", "bench", "--size", "tiny", "--json"]
    return subprocess.run(
        [*argv, "--scenario", "submit", "--server", servers],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def test_the_leader_of_the_list_is_measured(leader: Broker, tmp_path: Path) -> None:
    standby = StandIn(307, leader.url)
    try:
        run = _bench(f"{DOWN}, {standby.url}/,{leader.url}", tmp_path)
    finally:
        standby.shutdown()
    assert run.returncode == 0, run.stdout + run.stderr
    (line,) = [json.loads(text) for text in run.stdout.splitlines() if text.strip()]
    assert line["scenario"] == "submit" and "error" not in line, line
    assert line["per_s"] > 0
    assert standby.seen == [("GET", "/readyz")], "the standby is only asked if it leads"
    with leader.client() as http:
        made = http.get("/jobs", params={"limit": 1}).json()["items"]
    assert made, "the jobs were submitted to the leader"


def test_a_list_that_names_no_broker_is_refused(tmp_path: Path) -> None:
    run = _bench("ftp://127.0.0.1:9", tmp_path)
    assert run.returncode == 2
    assert "--server" in run.stderr and "ftp://127.0.0.1:9" in run.stderr
