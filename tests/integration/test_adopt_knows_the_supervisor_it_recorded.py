"""Re-adoption trusts a supervisor only if it is alive and is the process recorded.

A held flock on supervisor.lock says "alive"; the recorded pid with its start time says
"this one", so a reused pid is never taken for the supervisor. When the record is lost, the
supervisor is found by its command line, which names the state directory.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import anyio
import pytest

from jobd.worker.shim.client import adopt, launch, scan
from jobd.worker.shim.procfs import ProcessIdentity
from tests.integration.supervised import (
    CHECKPOINTS_ON_SIGTERM,
    python_spec,
    wait_ready,
)


@pytest.mark.anyio
async def test_a_reused_pid_is_not_mistaken_for_the_supervisor(
    state_root: Path,
) -> None:
    state_dir = state_root / "42-1"
    job = launch(state_dir, python_spec(CHECKPOINTS_ON_SIGTERM))
    await job.started()
    record_file = state_dir / "supervisor.json"
    true_record = record_file.read_text()
    faked = json.loads(true_record)
    faked["supervisor_start_time"] += 1  # the same pid, another process
    record_file.write_text(json.dumps(faked))
    assert adopt(state_dir) is None
    record_file.write_text(true_record)
    assert adopt(state_dir) is not None

    # A live process under the recorded pid, but no lock held: no supervisor there either.
    elsewhere = state_root / "43-1"
    elsewhere.mkdir()
    me = ProcessIdentity.of(os.getpid())
    assert me is not None
    record = {"supervisor_pid": me.pid, "supervisor_start_time": me.start_time}
    (elsewhere / "supervisor.json").write_text(json.dumps(record))
    assert adopt(elsewhere) is None


@pytest.mark.anyio
async def test_a_supervisor_whose_record_is_lost_is_found_and_takes_a_stop_from_its_file(
    state_root: Path,
) -> None:
    state_dir = state_root / "42-1"
    launched = launch(state_dir, python_spec(CHECKPOINTS_ON_SIGTERM))
    record = await launched.started()
    wait_ready(launched)
    (state_dir / "supervisor.json").unlink()
    job = adopt(state_dir)
    assert job is not None and job.is_alive()
    job.request_stop(5, "cancel")  # no record, so no signal: the file is polled
    with anyio.fail_after(3):
        status = await job.wait()
    assert record.workload is not None
    assert (status.exit_code, status.workload_pid) == (0, record.workload.pid)
    await launched.wait()  # reap our child


@pytest.mark.anyio
async def test_scan_lists_live_and_finished_supervisors_only(
    state_root: Path,
) -> None:
    live = launch(state_root / "1-1", python_spec(CHECKPOINTS_ON_SIGTERM))
    finished = launch(state_root / "2-1", python_spec("pass"))
    (state_root / "3-1").mkdir()  # nothing launched
    await live.started()
    with anyio.fail_after(5):
        await finished.wait()
    found = {job.state_dir.name: job for job in scan(state_root)}
    assert sorted(found) == ["1-1", "2-1"]
    assert found["1-1"].status() is None
    assert found["2-1"].status() is not None
    assert scan(state_root / "absent") == []
