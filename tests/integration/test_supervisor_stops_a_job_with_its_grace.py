"""A stop is the supervisor's to carry out: SIGTERM, the grace, SIGKILL, whoever asked.

Before the supervisor, SIGTERM to the agent SIGKILLed every job within 12 ms: no grace, no
checkpoint. Now the deadline lives in the supervisor, and in stopping.json for whoever adopts.
"""

from __future__ import annotations

import os
import signal
import time
from datetime import datetime
from pathlib import Path

import anyio
import pytest

from jobd.worker.shim.client import Shim, adopt, launch
from jobd.worker.shim.protocol import ExitStatus
from tests.integration.supervised import (
    CHECKPOINTS_ON_SIGTERM,
    STUBBORN_WITH_CHILD,
    is_gone,
    kill_launcher,
    python_spec,
    start_launcher,
    wait_for,
    wait_ready,
)


def seconds_between(earlier: str, later: str) -> float:
    return (datetime.fromisoformat(later) - datetime.fromisoformat(earlier)).total_seconds()


async def wait_within(job: Shim, seconds: float) -> ExitStatus:
    with anyio.fail_after(seconds):
        return await job.wait()


@pytest.mark.anyio
async def test_a_job_that_traps_sigterm_exits_and_its_exit_is_recorded(
    state_root: Path,
) -> None:
    job = launch(state_root / "42-1", python_spec(CHECKPOINTS_ON_SIGTERM))
    wait_ready(job)
    begun = time.monotonic()
    job.request_stop(10, "preempt")
    status = await wait_within(job, 3)
    assert time.monotonic() - begun < 2
    assert (status.exit_code, status.signal) == (0, None)
    assert status.stop is not None
    assert (status.stop.reason, status.stop.sigkill_at) == ("preempt", None)
    assert b"jobd-checkpoint-complete\n" in job.stdout_path.read_bytes()


@pytest.mark.anyio
async def test_a_job_ignoring_sigterm_is_killed_at_the_deadline_though_its_launcher_died(
    state_root: Path,
    tmp_path: Path,
) -> None:
    state_dir, child_pid_file = state_root / "42-1", tmp_path / "child.pid"
    spec = python_spec(STUBBORN_WITH_CHILD, str(child_pid_file))
    launcher = start_launcher(state_dir, spec, stop={"grace_s": 1.0, "reason": "cancel"})
    kill_launcher(launcher)  # during the grace
    job = adopt(state_dir)
    assert job is not None
    wait_for(lambda: job.stopping() is not None)
    stopping = job.stopping()
    assert stopping is not None and stopping.sigkill_at is None  # the deadline, for an adopter
    assert seconds_between(stopping.sigterm_at, stopping.kill_at) == pytest.approx(1.0, abs=0.01)

    status = await wait_within(job, 4)
    assert (status.exit_code, status.signal, status.signal_name) == (None, 9, "SIGKILL")
    assert status.stop is not None and status.stop.sigkill_at is not None
    assert status.stop.reason == "cancel"
    assert 1.0 <= seconds_between(status.stop.sigterm_at, status.stop.sigkill_at) < 1.6
    wait_for(lambda: is_gone(int(child_pid_file.read_text())))


@pytest.mark.anyio
async def test_sigterm_to_the_supervisor_stops_the_job_with_the_specs_grace(
    state_root: Path,
    tmp_path: Path,
) -> None:
    spec = python_spec(STUBBORN_WITH_CHILD, str(tmp_path / "child.pid"), grace_s=0.3)
    job = launch(state_root / "42-1", spec)
    record = await job.started()
    wait_ready(job)
    os.kill(record.shim.pid, signal.SIGTERM)
    status = await wait_within(job, 3)
    assert status.signal == signal.SIGKILL
    assert status.stop is not None and status.stop.sigkill_at is not None
    assert (status.stop.reason, status.stop.grace_s) == ("SIGTERM", 0.3)


@pytest.mark.anyio
async def test_sigint_and_sighup_to_the_supervisor_do_not_end_the_job(
    state_root: Path,
) -> None:
    job = launch(state_root / "42-1", python_spec(CHECKPOINTS_ON_SIGTERM))
    record = await job.started()
    wait_ready(job)
    for sig in (signal.SIGINT, signal.SIGHUP):
        os.kill(record.shim.pid, sig)
    time.sleep(0.3)
    assert job.status() is None
    assert record.workload is not None and record.workload.is_running()
    assert job.stopping() is None

    job.request_stop(0, "cancel")
    status = await wait_within(job, 3)
    assert status.stop is not None and status.stop.reason == "cancel"


@pytest.mark.anyio
async def test_a_stop_requested_before_the_start_means_no_start(
    state_root: Path,
) -> None:
    state_dir = state_root / "42-1"
    state_dir.mkdir()
    (state_dir / "stop").write_text('{"reason": "cancel", "grace_s": 0}')
    status = await wait_within(launch(state_dir, python_spec(CHECKPOINTS_ON_SIGTERM)), 3)
    assert (status.exit_code, status.signal, status.workload_pid) == (None, None, None)
    assert status.stop is not None and status.stop.reason == "cancel"
    assert status.error == "stopped before the workload started"
