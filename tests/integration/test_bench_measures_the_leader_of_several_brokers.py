"""`jobd bench --server a,b,c` takes the comma-separated list the clients take
(wire/failover.py) and measures the broker that leads.

A real `jobd broker` leads (its `/readyz` says `leader`); beside it, listed before it, a
broker that is down and a stand-in standby, a real HTTP server answering `/readyz`
`standby` and every other request 307 to the leader, as a standby broker does. The
bench's submit scenario runs against the leader: the standby is asked only whether it
leads. A list naming no broker address is refused (exit 2) naming it.
"""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fuzz.broker import TOKEN, Broker, running_broker

DOWN = "http://127.0.0.1:9"  # the discard port: nothing listens there


class Standby(http.server.ThreadingHTTPServer):
    """`/readyz`: 200 `standby`; anything else: 307 to the leader, as a standby answers."""

    def __init__(self, leader: str) -> None:
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _any(self) -> None:
                server.seen.append((self.command, self.path))
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                body = b"standby\n" if self.path == "/readyz" else b""
                self.send_response(200 if self.path == "/readyz" else 307)
                if self.path != "/readyz":
                    self.send_header("Location", leader + self.path)
                    self.send_header("X-Jobd-Leader", leader)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_DELETE = _any

            def log_message(self, *args: Any) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server_address[1]}"
        self.seen: list[tuple[str, str]] = []
        threading.Thread(target=self.serve_forever, daemon=True).start()


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
    standby = Standby(leader.url)
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
