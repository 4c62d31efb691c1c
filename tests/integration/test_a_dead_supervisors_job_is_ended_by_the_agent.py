"""A supervisor that dies (SIGKILL, OOM killer) takes the job's exit with it, not the job.

Its job runs on, unwatched: the agent learns the exit is lost (status() says so, adopt()
says None) and ends the job as the supervisor would have: every process of its group and
session SIGKILLed and seen gone before the end is reported, never a stranger's process that
took a recorded pid.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest

from jobd.worker.shim.client import adopt, end_orphaned_job, kill_orphaned_workload, launch
from jobd.worker.shim.containment import ProcessGroup
from jobd.worker.shim.procfs import ProcessIdentity
from jobd.worker.shim.remains import job_remains, kill_job_remains
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


# Starts a child in a process group of its own (still in the job's session), writes its
# pid and its own to argv[1], says ready, and sleeps.
LEAVES_ITS_GROUP = """
import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], process_group=0)
open(sys.argv[1], "w").write(f"{os.getpid()} {child.pid}")
print("ready", flush=True)
time.sleep(60)
"""


@pytest.mark.anyio
async def test_the_agent_kills_the_whole_job_and_sees_it_gone_before_it_reports(
    state_root: Path, tmp_path: Path
) -> None:
    state_dir, pid_file = state_root / "42-1", tmp_path / "pids"
    job = launch(state_dir, python_spec(LEAVES_ITS_GROUP, str(pid_file)))
    record = await job.started()
    assert record.workload is not None
    wait_ready(job)
    pids = [int(pid) for pid in pid_file.read_text().split()]
    assert {member.pid for member in job_remains(record.workload)} == set(pids)
    os.kill(record.shim.pid, signal.SIGKILL)
    with anyio.fail_after(3):
        assert (await job.wait()).lost

    killed, left = await end_orphaned_job(state_dir, ProcessGroup())
    assert sorted(member.pid for member in killed) == sorted(pids)
    assert left == []
    # Gone when it returns: nothing is left to signal, and each pid is dead or a zombie.
    assert job_remains(record.workload) == []
    assert not any(_runs(pid) for pid in pids)
    assert await end_orphaned_job(state_dir, ProcessGroup()) == ([], [])
    for pid in pids:
        wait_for(lambda pid=pid: is_gone(pid))


def test_a_process_that_took_the_workloads_pid_is_never_killed(tmp_path: Path) -> None:
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        identity = ProcessIdentity.of(stranger.pid)
        assert identity is not None
        # The workload recorded under this pid started earlier: the pid has been reused.
        recorded = ProcessIdentity(stranger.pid, identity.start_time - 1)
        assert job_remains(recorded) == []
        assert kill_job_remains(recorded) == []
        time.sleep(0.1)
        assert stranger.poll() is None
    finally:
        stranger.kill()
        stranger.wait()


def _runs(pid: int) -> bool:
    identity = ProcessIdentity.of(pid)
    return identity is not None and identity.is_running()
