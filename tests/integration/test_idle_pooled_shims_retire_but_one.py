"""After a burst of jobs the agent keeps one idle shim warm and retires the others.

Real shims and workloads: four jobs at once take four shims; once they are over and
SPARE_IDLE_S has passed, only the shim most recently idle is alive, and the next job runs
in it (no new interpreter). Waits are bounded generously: the figure held is the end
state, not when.
"""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import pytest

from jobd.worker.shim.client import Shim, ShimPool
from jobd.worker.shim.client.pool import SPARE_IDLE_S, WARM
from tests.integration.supervised import python_spec

SLEEPS = "import time; time.sleep(0.3)"


def _alive(pids: set[int]) -> set[int]:
    return {pid for pid in pids if Path(f"/proc/{pid}").exists()}


async def _burst(pool: ShimPool, state_root: Path, n: int) -> set[int]:
    """n jobs at once, each to its end; the pids of the shims that served them."""
    jobs: dict[int, Shim] = {}

    async def launch(i: int) -> None:
        spec = python_spec(SLEEPS).replace(job_id=i)
        jobs[i] = await pool.launch(state_root / f"{i}-1", spec)

    async with anyio.create_task_group() as tg:
        for i in range(n):
            tg.start_soon(launch, i)
    with anyio.fail_after(20):
        for job in jobs.values():
            await job.wait()
    return {job.identity.pid for job in jobs.values() if job.identity is not None}


@pytest.mark.anyio
async def test_idle_shims_retire_but_the_warm_one_which_takes_the_next_job(
    state_root: Path,
) -> None:
    pool = ShimPool()
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(pool.run)  # the agent's task that retires spares
            await _used_then_one_kept(pool, state_root)
            tg.cancel_scope.cancel()
    finally:
        await pool.aclose()


async def _used_then_one_kept(pool: ShimPool, state_root: Path) -> None:
    """A burst of four; once spares are retired, the next job goes to the one kept."""
    shims = await _burst(pool, state_root, 4)
    assert len(shims) == 4
    deadline = time.monotonic() + SPARE_IDLE_S + 15
    while len(_alive(shims)) > WARM and time.monotonic() < deadline:
        await anyio.sleep(0.2)
    (warm,) = _alive(shims)
    spec = python_spec("pass").replace(job_id=99)
    nxt = await pool.launch(state_root / "99-1", spec)
    assert nxt.identity is not None and nxt.identity.pid == warm
    with anyio.fail_after(10):
        assert (await nxt.wait()).exit_code == 0
