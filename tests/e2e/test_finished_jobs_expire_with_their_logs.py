"""Retention: a finished job, its logs and its events are removed once its TTL passes
(issue 13, item 5), through the broker's default (`JOBD_FINISHED_JOB_TTL_S`) or the
job's own `ttl_after_finished_s`, which wins."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.harness import Jobd, start_jobd, stop_jobd


@pytest.fixture(scope="module")
def jobd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Jobd]:
    """`jobd dev` keeping finished jobs two seconds, unless they say otherwise."""
    root = tmp_path_factory.mktemp("jobd")
    running = start_jobd(root, "--slots", "2", env_extra={"JOBD_FINISHED_JOB_TTL_S": "2"})
    yield running
    stop_jobd(running)


def _log_files(jobd: Jobd, job_id: int) -> list[Path]:
    return sorted((jobd.root / "logs" / "jobs").glob(f"{job_id}.*"))


def _wait_gone(jobd: Jobd, job_id: int, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while jobd.job("get", str(job_id)).returncode == 0:
        assert time.monotonic() < deadline, f"job {job_id} was not removed"
        time.sleep(0.1)


def test_the_broker_default_removes_a_finished_job_its_logs_and_events(jobd: Jobd) -> None:
    job_id = int(jobd.ok("submit", "--", "echo", "hello").strip())
    jobd.wait_phase(job_id, "Succeeded")
    assert jobd.ok("logs", str(job_id)) == "hello\n"
    assert _log_files(jobd, job_id), "the broker holds its output while it is kept"
    _wait_gone(jobd, job_id)
    missing = jobd.job("get", str(job_id))
    assert missing.returncode != 0 and "not found" in missing.stderr
    assert _log_files(jobd, job_id) == []
    with jobd.api() as api:
        left = api.get("/events", params={"job": job_id}).json()["items"]
    assert [e["event"] for e in left] == ["job_expired"], "its events went with it"
    (expired,) = jobd.events(event="job_expired", job=job_id)
    assert (expired["phase"], expired["ttl_s"]) == ("Succeeded", 2.0)


def test_a_jobs_own_ttl_wins_over_the_broker_default(jobd: Jobd) -> None:
    kept = int(jobd.ok("submit", "--ttl-after-finished", "1d", "--", "true").strip())
    short = int(jobd.ok("submit", "--ttl-after-finished", "1", "--", "true").strip())
    jobd.wait_phase(kept, "Succeeded")
    _wait_gone(jobd, short)
    time.sleep(2.5)  # past the broker's default of 2 s
    assert jobd.get(kept)["status"]["phase"] == "Succeeded"
