"""A broker whose PostgreSQL goes away keeps running, acknowledges nothing it did not
commit, says so once, and serves again by itself when the database is back.

A real `jobd broker` and `jobd worker` on a PostgreSQL server the test starts itself
(tests/own_postgres.py: never the shared one), under load: jobs submitted all along
and run by the worker. The server is restarted (`pg_ctl restart -m fast`) during the
load, then stopped for a while and started again. Every job the broker acknowledged
(201) is in the store afterwards and runs to its end; every other answer was 503; the
broker never exits; while the database is down `/readyz` fails and `/healthz` does not,
and `/metrics` says `jobd_store_reachable 0`; the outage is logged once, not per
request or per loop.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.harness import Lab
from tests.own_postgres import OwnPostgres

pytestmark = pytest.mark.postgres

SERVICE_BACK_S = 5.0  # the bound on a service's return after the database's


class Load:
    """Submits a job every few tens of milliseconds, keeping every answer."""

    def __init__(self, lab: Lab) -> None:
        token = (lab.root / "data" / "admin.token").read_text().strip()
        self.api = httpx.Client(
            base_url=lab.url, headers={"Authorization": f"Bearer {token}"}, timeout=10
        )
        self.acknowledged: list[int] = []
        self.answers: list[tuple[float, int]] = []  # (monotonic time, status)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            doc = {
                "apiVersion": "jobd/v1",
                "kind": "Job",
                "metadata": {"project": "default"},
                "spec": {"command": ["true"]},
            }
            answer = self.api.post("/jobs", json=doc)
            self.answers.append((time.monotonic(), answer.status_code))
            if answer.status_code == 201:
                self.acknowledged.append(int(answer.json()["metadata"]["id"]))
            time.sleep(0.03)

    def first_success_after(self, since: float, timeout_s: float = 30.0) -> float:
        """Seconds from `since` to the first 201 answered after it."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            found = [at for at, status in self.answers if at > since and status == 201]
            if found:
                return found[0] - since
            time.sleep(0.02)
        raise AssertionError(f"no job was accepted within {timeout_s} s of the database's return")

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self.api.close()


class PostgresLab(Lab):
    """A lab whose broker keeps its store on the given PostgreSQL."""

    def __init__(self, root: Path, db: str) -> None:
        self.db = db
        super().__init__(root)

    def start(self, log: str, *args: str) -> None:
        if args[:1] == ("broker",):
            args = (*args, "--db", self.db)
        super().start(log, *args)


@pytest.fixture
def lab(tmp_path: Path, own_postgres: OwnPostgres) -> Iterator[Lab]:
    running = PostgresLab(tmp_path, own_postgres.url)
    running.start("worker", "worker", "--name", "w1", "--slots", "4")
    running.wait_workers(1)
    yield running
    running.close()


def _logged(lab: Lab) -> Counter[str]:
    lines = (lab.root / "broker.log").read_text().splitlines()
    return Counter(json.loads(line)["event"] for line in lines if line.startswith("{"))


def _succeeded(lab: Lab) -> set[int]:
    listed = lab.api("GET", "/jobs?phase=Succeeded")["items"]
    return {job["metadata"]["id"] for job in listed}


def _reachable(lab: Lab) -> str:
    """`jobd_store_reachable` as /metrics says it."""
    text = httpx.get(f"{lab.url}/metrics", timeout=5).text
    found = re.search(r"^jobd_store_reachable (\S+)$", text, re.MULTILINE)
    assert found is not None, "no jobd_store_reachable in /metrics"
    return found.group(1)


def _status(lab: Lab, path: str) -> int:
    return httpx.get(f"{lab.url}{path}", timeout=5).status_code


def test_restarts_and_an_outage_lose_no_acknowledged_job(
    lab: Lab, own_postgres: OwnPostgres
) -> None:
    load = Load(lab)
    try:
        time.sleep(1.0)
        own_postgres.restart()
        restarted = time.monotonic()
        restart_back_s = load.first_success_after(restarted)
        own_postgres.stop()
        own_postgres.wait_gone()
        time.sleep(1.5)
        assert (_status(lab, "/readyz"), _status(lab, "/healthz")) == (503, 200)
        assert _reachable(lab) == "0.0"
        own_postgres.start()
        started = time.monotonic()
        outage_back_s = load.first_success_after(started)
        time.sleep(0.5)
    finally:
        load.stop()
    print(
        f"service back {restart_back_s:.2f} s after a restart, {outage_back_s:.2f} s after a start"
    )
    assert restart_back_s < SERVICE_BACK_S and outage_back_s < SERVICE_BACK_S
    assert set(status for _, status in load.answers) <= {201, 503}
    assert lab.processes["broker"].poll() is None
    lab.wait_until(lambda: _status(lab, "/readyz") == 200, timeout=SERVICE_BACK_S)
    lab.wait_until(lambda: _reachable(lab) == "1.0", timeout=SERVICE_BACK_S)
    lab.wait_until(lambda: _succeeded(lab) >= set(load.acknowledged))  # stored, and run
    logged = _logged(lab)
    # Said once an outage (the restart may be too short for the broker to notice), and
    # its end; no pass of a loop logged as a failure with its traceback.
    assert logged["store_unreachable"] in (1, 2)
    assert logged["store_reachable"] == logged["store_unreachable"]
    assert logged["reconcile_failed"] == 0
    assert logged["reconcile_deferred"] <= 2 and logged["tokens_not_reloaded"] <= 2
