"""kill -9 of a real `jobd dev` during submits: no acknowledged job is lost, and at the next
start events.jsonl is completed from the events table (every event once, in order).

The soak runs the same 200 times (`make soak`).
"""

from __future__ import annotations

import json
import signal
import threading
import time
from pathlib import Path

import httpx
import pytest

from jobd.store.sql import open_store, sqlite_url
from tests.e2e.harness import Jobd, start_jobd, stop_jobd
from tests.integration.conftest import job_document


def _submit_until_killed(jobd: Jobd, acknowledged: list[str], stop: threading.Event) -> None:
    with jobd.api() as api:
        for i in range(100_000):
            if stop.is_set():
                return
            name = f"k-{len(acknowledged)}-{i}-{time.monotonic_ns()}"
            try:
                if api.post("/jobs", json=job_document(name)).status_code == 201:
                    acknowledged.append(name)
            except httpx.TransportError:
                return


def _kill_during_submits(root: Path, acknowledged: list[str], after_s: float) -> None:
    jobd = start_jobd(root)
    stop = threading.Event()
    submitter = threading.Thread(target=_submit_until_killed, args=(jobd, acknowledged, stop))
    submitter.start()
    time.sleep(after_s)
    jobd.process.send_signal(signal.SIGKILL)
    jobd.process.wait()
    stop.set()
    submitter.join()


def _check_after_restart(root: Path, acknowledged: list[str]) -> None:
    stop_jobd(start_jobd(root))  # its start completes the file; then a clean stop
    store = open_store(sqlite_url(root / "data"))
    try:
        stored = {job.metadata.name for job in store.list_jobs()}
        table = [(ev.seq, ev.event, ev.job) for ev in store.list_events(limit=1_000_000)]
    finally:
        store.close()
    assert set(acknowledged) <= stored, "an acknowledged job was lost"
    lines = (root / "logs" / "events.jsonl").read_text().splitlines()
    written = [(e["seq"], e["event"], e.get("job")) for e in map(json.loads, lines)]
    assert written == table


def test_kill_9_during_submits_loses_no_job_and_the_file_is_completed(tmp_path: Path) -> None:
    acknowledged: list[str] = []
    _kill_during_submits(tmp_path, acknowledged, after_s=0.5)
    assert acknowledged
    _check_after_restart(tmp_path, acknowledged)


@pytest.mark.soak
def test_kill_9_two_hundred_times(tmp_path: Path) -> None:
    acknowledged: list[str] = []
    for round_ in range(200):
        _kill_during_submits(tmp_path, acknowledged, after_s=0.1 + (round_ % 5) * 0.1)
    _check_after_restart(tmp_path, acknowledged)
