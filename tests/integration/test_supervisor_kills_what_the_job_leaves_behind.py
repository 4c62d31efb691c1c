"""Nothing of a job outlives its main process: the supervisor kills and reaps the rest.

Being a child subreaper, it inherits a double-forked daemon that left the job's process
group and session, and kills it with the group. A workload that cannot start is recorded.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from jobd.worker.shim.client import launch
from tests.integration.supervised import (
    is_gone,
    python_spec,
    wait_for,
)

# Leaves a child in its group and a daemon (double fork, setsid) outside it, then exits 0.
EXIT_LEAVING_CHILD_AND_DAEMON = """
import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
read_end, write_end = os.pipe()
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.write(write_end, str(os.getpid()).encode())
        time.sleep(60)
    os._exit(0)
os.close(write_end)
daemon = os.read(read_end, 32).decode()
open(sys.argv[1], "w").write(f"{child.pid} {daemon}")
"""


@pytest.mark.anyio
async def test_a_child_and_a_double_forked_daemon_are_killed_when_the_job_ends(
    state_root: Path,
    tmp_path: Path,
) -> None:
    pids_file = tmp_path / "pids"
    job = launch(state_root / "42-1", python_spec(EXIT_LEAVING_CHILD_AND_DAEMON, str(pids_file)))
    with anyio.fail_after(5):
        status = await job.wait()
    assert (status.exit_code, status.signal) == (0, None)
    for pid in map(int, pids_file.read_text().split()):
        wait_for(lambda pid=pid: is_gone(pid))


@pytest.mark.anyio
async def test_a_workload_that_cannot_start_is_recorded_as_exit_127(
    state_root: Path,
) -> None:
    spec = python_spec("")
    spec = type(spec)(**{**spec.__dict__, "argv": ["/nonexistent/train"]})
    job = launch(state_root / "42-1", spec)
    with anyio.fail_after(5):
        status = await job.wait()
    assert (status.exit_code, status.signal, status.workload_pid) == (127, None, None)
    assert status.error is not None and "/nonexistent/train" in status.error
    assert b"cannot start '/nonexistent/train'" in job.stderr_path.read_bytes()
