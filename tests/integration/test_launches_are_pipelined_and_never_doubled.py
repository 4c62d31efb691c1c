"""The launcher forks supervisors without waiting for one before the next, and never twice.

Each launch request carries an id and each supervisor answers for itself once its workload
runs, so many launches at once each get their own supervisor, answer and exit code; a
second launch into a directory that holds one returns the job already there.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from jobd.worker.shim.client import Shim, ShimPool
from tests.integration.supervised import (
    python_spec,
)

# Waits for the go file, then exits with the code it was given: every workload runs until
# all 16 launches are answered, so no supervisor is idle meanwhile to be given a second one
# (a serving shim takes job after job: it may, once its job is over).
WAITS_THEN_EXITS = (
    "import os, sys, time\n"
    "while not os.path.exists(sys.argv[2]): time.sleep(0.01)\n"
    "sys.exit(int(sys.argv[1]))"
)


@pytest.mark.anyio
async def test_concurrent_launches_each_get_their_own_answer_and_exit(
    state_root: Path,
) -> None:
    launcher = ShimPool()
    jobs: dict[int, Shim] = {}
    go = state_root.parent / "go"

    async def launch(i: int) -> None:
        spec = python_spec(WAITS_THEN_EXITS, str(i % 7), str(go)).replace(job_id=i)
        jobs[i] = await launcher.launch(state_root / f"{i}-1", spec)

    try:
        async with anyio.create_task_group() as tg:  # 16 requests in flight at once
            for i in range(16):
                tg.start_soon(launch, i)
        supervisors = {job.identity for job in jobs.values()}
        assert len(supervisors) == 16 and None not in supervisors
        go.touch()
        with anyio.fail_after(20):
            ends = {i: await job.wait() for i, job in jobs.items()}
        assert {i: end.exit_code for i, end in ends.items()} == {i: i % 7 for i in range(16)}
        for i, job in jobs.items():  # each its own workload, in its own directory
            record = job.record()
            assert record is not None and record.job_id == i
    finally:
        go.touch()  # a failed assertion leaves no workload waiting
        await launcher.aclose()


@pytest.mark.anyio
async def test_a_second_launch_into_the_same_directory_returns_the_first_job(
    state_root: Path,
) -> None:
    launcher = ShimPool()
    state_dir = state_root / "7-1"
    started = state_root / "starts"
    code = "import sys, time; open(sys.argv[1], 'a').write('x'); time.sleep(0.5)"
    spec = python_spec(code, str(started))
    try:
        first = await launcher.launch(state_dir, spec)
        second = await launcher.launch(state_dir, spec)
        assert second.identity == first.identity
        with anyio.fail_after(10):
            end = await first.wait()
        assert end.exit_code == 0
        assert started.read_text() == "x"  # started once
    finally:
        await launcher.aclose()
