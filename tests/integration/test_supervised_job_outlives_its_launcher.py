"""A job's exit code and output survive the death of the process that launched its supervisor.

What was seen before the supervisor: `kill -9` of the agent killed every job that printed
(its stdout was a pipe to the agent) and orphaned the silent ones, with no exit recorded.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from jobd.worker.shim.client import adopt
from tests.integration.supervised import (
    CHECKPOINTS_ON_SIGTERM,
    kill_launcher,
    python_spec,
    start_launcher,
    wait_for,
)

# Says it started (on stdout, and in the file argv[2]), prints on while it waits for the
# file argv[1] if argv[3] says so, then exits 3.
WAITS_FOR_RELEASE = """
import os, sys, time
release, started, printing = sys.argv[1], sys.argv[2], sys.argv[3] == "printing"
open(started, "w").close()
while not os.path.exists(release):
    if printing:
        print("tick", flush=True)
    time.sleep(0.01)
if printing:
    print("done", flush=True)
sys.exit(3)
"""


@pytest.mark.parametrize("output", ["printing", "silent"])
def test_exit_code_and_output_survive_the_launchers_death_and_nobody_watching(
    state_root: Path,
    tmp_path: Path,
    output: str,
) -> None:
    release, started = tmp_path / "release", tmp_path / "started"
    state_dir = state_root / "42-1"
    spec = python_spec(WAITS_FOR_RELEASE, str(release), str(started), output)
    launcher = start_launcher(state_dir, spec)
    wait_for(started.exists)
    kill_launcher(launcher)
    stdout = state_dir / "stdout"
    printed_at_kill = stdout.stat().st_size
    if output == "printing":  # it prints on, with nobody reading
        wait_for(lambda: stdout.stat().st_size > printed_at_kill + 50)
    release.touch()

    wait_for((state_dir / "status.json").exists)  # it ended while nobody watched
    job = adopt(state_dir)
    assert job is not None
    status = job.status()
    assert status is not None
    assert (status.exit_code, status.signal, status.stop, status.error) == (3, None, None, None)
    assert status.workload_pid is not None
    if output == "printing":
        assert stdout.read_bytes().endswith(b"tick\ndone\n")
    else:
        assert stdout.read_bytes() == b""
    assert (state_dir / "stderr").read_bytes() == b""


@pytest.mark.anyio
async def test_an_adopted_job_is_stopped_and_waited_for(state_root: Path) -> None:
    state_dir = state_root / "42-1"
    kill_launcher(start_launcher(state_dir, python_spec(CHECKPOINTS_ON_SIGTERM)))
    wait_for(lambda: b"ready" in (state_dir / "stdout").read_bytes())
    job = adopt(state_dir)
    assert job is not None
    assert job.is_alive()
    assert job.status() is None
    record = job.record()
    assert record is not None and record.workload is not None
    assert (record.job_id, record.attempt) == (42, 1)

    job.request_stop(5, "preempt")
    with anyio.fail_after(3):
        status = await job.wait()
    assert (status.exit_code, status.signal) == (0, None)
    assert status.stop is not None
    assert (status.stop.reason, status.stop.grace_s, status.stop.sigkill_at) == ("preempt", 5, None)
    assert job.stdout_path.read_bytes() == b"ready\njobd-checkpoint-complete\n"
