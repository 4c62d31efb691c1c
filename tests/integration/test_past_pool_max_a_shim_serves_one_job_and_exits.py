"""Past POOL_MAX kept shims, a launch still runs: its shim serves that one job and exits.

Real shims and workloads, with POOL_MAX made 1: two jobs at once take the kept shim and
one more; the second ends its job and exits (its pipe was closed once the request was
in), is reaped, and the next launch goes to the kept one.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from jobd.worker.shim.client import Shim, ShimPool
from jobd.worker.shim.client import pool as pool_module
from tests.integration.supervised import python_spec

SLEEPS = "import time; time.sleep(0.3)"


def _exited(pid: int) -> bool:
    """Gone, or a zombie left for its parent to reap."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] == "Z"
    except OSError:
        return True


@pytest.mark.anyio
async def test_a_shim_past_the_cap_serves_its_one_job_and_exits(
    state_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pool_module, "POOL_MAX", 1)
    pool = ShimPool()
    jobs: dict[int, Shim] = {}

    async def launch(i: int) -> None:
        jobs[i] = await pool.launch(state_root / f"{i}-1", python_spec(SLEEPS).replace(job_id=i))

    try:
        async with anyio.create_task_group() as tg:
            for i in (1, 2):
                tg.start_soon(launch, i)
        pids = {job.identity.pid for job in jobs.values() if job.identity is not None}
        assert len(pids) == 2
        with anyio.fail_after(20):
            for job in jobs.values():
                assert (await job.wait()).exit_code == 0
            while not any(_exited(pid) for pid in pids):
                await anyio.sleep(0.05)
        (kept,) = [pid for pid in pids if not _exited(pid)]
        nxt = await pool.launch(state_root / "3-1", python_spec("pass").replace(job_id=3))
        assert nxt.identity is not None and nxt.identity.pid == kept
        with anyio.fail_after(10):
            assert (await nxt.wait()).exit_code == 0
    finally:
        await pool.aclose()
