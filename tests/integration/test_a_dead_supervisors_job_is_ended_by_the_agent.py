"""A supervisor that dies (SIGKILL, OOM killer) takes the job's exit with it, not the job.

Its job runs on, unwatched: the agent learns the exit is lost (status() says so, adopt()
says None) and ends the job as the supervisor would have.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import anyio
import pytest

from jobd.worker.shim.client import adopt, kill_orphaned_workload, launch
from tests.integration.supervised import (
    CHECKPOINTS_ON_SIGTERM,
    is_gone,
    python_spec,
    wait_for,
    wait_ready,
)


@pytest.mark.anyio
async def test_the_job_of_a_killed_supervisor_is_reported_lost_and_killed(
    state_root: Path,
) -> None:
    state_dir = state_root / "42-1"
    job = launch(state_dir, python_spec(CHECKPOINTS_ON_SIGTERM))
    record = await job.started()
    assert record.workload is not None
    wait_ready(job)
    os.kill(record.shim.pid, signal.SIGKILL)
    with anyio.fail_after(3):
        status = await job.wait()
    assert status.lost and (status.exit_code, status.signal) == (None, None)
    assert record.workload.is_running()  # the job outlived its supervisor
    assert adopt(state_dir) is None

    assert kill_orphaned_workload(state_dir)
    wait_for(lambda: is_gone(record.workload.pid))
    assert not kill_orphaned_workload(state_dir)
