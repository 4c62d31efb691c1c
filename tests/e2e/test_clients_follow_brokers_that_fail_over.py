"""Clients given several brokers keep working while one is down, follow a standby's 307,
and the agent's reports are applied once when a broker dies after its commit.

Real processes throughout: `jobd broker` and `jobd worker` (the Lab), the `job` command,
the Python SDK. Two brokers share one SQLite file one after the other (leadership does
not matter here: a stopped broker is just a dead URL). Two stand-ins are real HTTP
servers on this host: a standby that answers every request 307 towards the real broker
(as a standby broker does, `Location` and `X-Jobd-Leader`), and a proxy that passes
requests to the broker until the agent's report of a job's end: that one it passes on,
reads the broker's answer (the broker has committed), kills the broker with SIGKILL and
hangs up on the agent without answering — the outcome the agent cannot know.
"""

from __future__ import annotations

import http.client
import http.server
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import jobd
from tests.e2e import harness
from tests.e2e.harness import _free_port

LEASE_S = "3"  # the worker heartbeats every second: it is heard soon after a failover


class Standin(http.server.ThreadingHTTPServer):
    """A real HTTP server on a free port whose handler `answer` decides each request."""

    def __init__(self, answer: Callable[[http.server.BaseHTTPRequestHandler], None]) -> None:
        class Handler(http.server.BaseHTTPRequestHandler):
            def _any(self) -> None:
                answer(self)

            do_GET = do_POST = do_PUT = do_DELETE = _any

            def log_message(self, *args: Any) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        self.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server_address[1]}"
        self.seen: list[tuple[str, str, str | None]] = []  # method, path, Authorization
        self.acted = threading.Event()  # set once a stand-in that acts once has acted
        threading.Thread(target=self.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.shutdown()
        self.server_close()


def standby_of(leader: str) -> Standin:
    """Answers every request 307 to the same path on `leader`, as a standby broker does."""
    holder: list[Standin] = []

    def redirect(handler: http.server.BaseHTTPRequestHandler) -> None:
        holder[0].seen.append((handler.command, handler.path, handler.headers["Authorization"]))
        length = int(handler.headers.get("Content-Length") or 0)
        handler.rfile.read(length)
        handler.send_response(307)
        handler.send_header("Location", leader + handler.path)
        handler.send_header("X-Jobd-Leader", leader)
        handler.send_header("Content-Length", "0")
        handler.end_headers()

    holder.append(Standin(redirect))
    return holder[0]


class Lab(harness.Lab):
    """A broker (`first`), the URL a second broker will take (`second`), and the lab's
    `job` and agents pointed at both."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.first = self.url
        self.second = f"http://127.0.0.1:{_free_port()}"

    def worker(self, servers: str) -> None:
        self.start(
            "worker", "worker", "--server", servers, "--name", "w1", "--gpus", "none",
            "--slots", "2", "--lease", LEASE_S,
            "--state-dir", str(self.root / "data" / "worker" / "w1"),
        )  # fmt: skip
        self.wait_workers(1)

    def kill(self, log: str) -> None:
        """SIGKILL the process, which the lab then no longer expects to run."""
        process = self.processes.pop(log)
        if process.poll() is None:
            process.kill()
        process.wait(10)

    def start_second(self) -> None:
        """The second broker, on the same store, at `second`; the lab's API asks it."""
        port = self.second.rsplit(":", 1)[1]
        self.start("broker-2", "broker", "--port", port)
        self.url = self.second
        self.wait_until(lambda: httpx.get(f"{self.url}/readyz").status_code == 200)

    def run_job(self, *argv: str) -> dict[str, Any]:
        """Submit through `job` (JOBD_URL as the lab's env says) and wait for its end."""
        said = self.job("submit", "--", *argv)
        assert said.returncode == 0, said.stderr
        job_id = int(said.stdout.strip())
        deadline = time.monotonic() + 30
        while (doc := self.api("GET", f"/jobs/{job_id}"))["status"]["phase"] != "Succeeded":
            assert time.monotonic() < deadline, doc["status"]
            time.sleep(0.05)
        return dict(doc)

    def token(self) -> str:
        return (self.root / "data" / "admin.token").read_text().strip()


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[Lab]:
    running = Lab(tmp_path)
    try:
        yield running
    finally:
        running.close()


def test_job_and_the_sdk_reach_the_broker_that_is_up_whichever_is_down(lab: Lab) -> None:
    lab.env["JOBD_URL"] = f"{lab.second},{lab.first}"  # the first named is down
    said = lab.job("submit", "--name", "over", "--", "true")
    assert said.returncode == 0, said.stderr
    job_id = said.stdout.strip()
    assert json.loads(lab.job("get", job_id, "-o", "json").stdout)["metadata"]["name"] == "over"
    with jobd.Client(f"{lab.second},{lab.first}", token=lab.token()) as client:
        assert client.get(int(job_id)).metadata.name == "over"
    lab.kill("broker")
    lab.start_second()  # now the first named is up, the other down
    got = lab.job("get", job_id, "-o", "json")
    assert got.returncode == 0, got.stderr
    assert json.loads(got.stdout)["metadata"]["name"] == "over"
    lab.env["JOBD_URL"] = f"{lab.first},{lab.second}"
    assert lab.job("get", job_id).returncode == 0
    lab.env["JOBD_URL"] = lab.first  # one URL, down: the error names it, as before
    down = lab.job("get", job_id)
    assert down.returncode != 0 and lab.first in down.stderr


def test_job_the_sdk_and_the_agent_follow_a_standbys_307_to_the_leader(lab: Lab) -> None:
    standby = standby_of(lab.first)
    try:
        lab.env["JOBD_URL"] = standby.url
        said = lab.job("submit", "--name", "moved", "--", "true")
        assert said.returncode == 0, said.stderr
        job_id = int(said.stdout.strip())
        # The same method, body and token went on to the leader, which created the job.
        assert ("POST", "/jobs", f"Bearer {lab.token()}") in standby.seen
        assert lab.api("GET", f"/jobs/{job_id}")["metadata"]["name"] == "moved"
        with jobd.Client(standby.url, token=lab.token()) as client:
            assert client.get(job_id).metadata.name == "moved"
        lab.worker(standby.url)  # registers through the 307, then runs the job
        lab.wait_until(lambda: lab.api("GET", f"/jobs/{job_id}")["status"]["phase"] == "Succeeded")
        registered = [s for s in standby.seen if s[:2] == ("PUT", "/workers/w1")]
        assert len(registered) == 1
        heard = len(standby.seen)
        time.sleep(2.5)  # two heartbeats: they go to the leader, not through the standby
        assert len(standby.seen) == heard
    finally:
        standby.close()


def test_the_agent_with_two_urls_heartbeats_and_reports_while_one_is_down(lab: Lab) -> None:
    lab.env["JOBD_URL"] = f"{lab.first},{lab.second}"
    lab.worker(lab.env["JOBD_URL"])
    lab.run_job("true")
    lab.kill("broker")
    lab.start_second()
    # Heard at the second broker: its heartbeats renew the lease there, and it runs jobs.
    lab.wait_until(lambda: lab.api("GET", "/workers/w1")["status"]["phase"] == "Ready")
    done = lab.run_job(sys.executable, "-c", "print('on the second broker')")
    assert done["status"]["worker"] == "w1"
    time.sleep(float(LEASE_S) + 1)  # a lease's time with the first broker down
    assert lab.api("GET", "/workers/w1")["status"]["phase"] == "Ready"


def cutting_proxy(lab: Lab, broker_pid: int) -> Standin:
    """Passes each request to the first broker; the agent's report batch that ends a job
    is passed on and committed, then the broker is killed and the agent hung up on."""
    holder: list[Standin] = []

    def forward(handler: http.server.BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length)
        upstream = http.client.HTTPConnection("127.0.0.1", int(lab.first.rsplit(":", 1)[1]))
        headers = {k: v for k, v in handler.headers.items() if k.lower() != "connection"}
        try:
            upstream.request(handler.command, handler.path, body, headers)
            answer = upstream.getresponse()
            data = answer.read()
        except OSError:  # the broker is gone (killed below, for a request at once)
            handler.close_connection = True
            return
        finally:
            upstream.close()
        if handler.path.endswith("/reports") and b'"complete"' in body and not cut.is_set():
            os.kill(broker_pid, signal.SIGKILL)  # after its commit, before its answer
            handler.close_connection = True  # the agent hears no answer at all
            threading.Thread(target=holder[0].close, daemon=True).start()
            cut.set()
            return
        handler.send_response(answer.status)
        for name, value in answer.getheaders():
            if name.lower() not in ("connection", "transfer-encoding"):
                handler.send_header(name, value)
        handler.end_headers()
        handler.wfile.write(data)

    holder.append(Standin(forward))
    cut = holder[0].acted
    return holder[0]


def test_a_report_whose_broker_died_after_its_commit_is_applied_once(lab: Lab) -> None:
    proxy = cutting_proxy(lab, lab.processes["broker"].pid)
    lab.worker(f"{proxy.url},{lab.second}")
    said = lab.job("submit", "--", sys.executable, "-c", "print('once')")
    assert said.returncode == 0, said.stderr
    job_id = int(said.stdout.strip())
    assert proxy.acted.wait(30), "no report of the job's end came"
    lab.kill("broker")
    committed = _phase_in_store(lab.root, job_id)
    assert committed == "Succeeded"  # the first broker committed the end it never answered
    lab.start_second()  # the agent's retry of the same batch reaches it
    lab.wait_until(lambda: _tidied(lab.root, job_id))  # acknowledged, by the second broker
    events = lab.api("GET", f"/events?job={job_id}")["items"]
    kinds = [e["event"] for e in events]
    for kind in ("job_started", "process_started", "process_exited", "job_finished"):
        assert kinds.count(kind) == 1, (kind, kinds)
    job = lab.api("GET", f"/jobs/{job_id}")
    assert job["status"]["phase"] == "Succeeded" and job["status"]["attempt"] == 1


def _phase_in_store(root: Path, job_id: int) -> str:
    import sqlite3

    with sqlite3.connect(root / "data" / "jobd.db") as db:
        (phase,) = db.execute("SELECT phase FROM jobs WHERE id = ?", (job_id,)).fetchone()
    return str(phase)


def _tidied(root: Path, job_id: int) -> bool:
    """The agent removed the job's state directory: its end was acknowledged."""
    return not list((root / "data" / "worker" / "w1" / "jobs").glob(f"{job_id}-*"))
