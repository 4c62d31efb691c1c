"""The agent warms its shims up at start: the first job then costs what every other does.

Real shims and workloads. After `ShimPool.warm_up` one serving shim, a child of the agent
(no process between them), waits idle (its first launch, a `true`, done), the warm-up's
scratch directory is gone, and the first real launch is served by that idle shim rather
than by a new interpreter; while it runs, a replacement is started (SPARE_AFTER_S later,
by the agent's task) and waits idle for the next.
"""

from __future__ import annotations

import os
from pathlib import Path

import anyio
import pytest

from jobd.worker.shim.client import ShimPool
from jobd.worker.shim.client.pool import SPARE_AFTER_S
from jobd.worker.shim.protocol import SERVE_FLAG, SHIM_MODULE
from tests.integration.supervised import python_spec

pytestmark = pytest.mark.anyio

SLEEPS = "import time; time.sleep(2)"


def _children(parent: int) -> dict[int, str]:
    """The live children of parent: pid -> command line."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if int(fields[1]) == parent and fields[0] != "Z":
            found[int(entry.name)] = cmdline
    return found


def _serving_shims() -> set[int]:
    """This process's live serving shims (an earlier test's may still be exiting)."""
    serving = f"{SHIM_MODULE} import main; sys.exit(main())"
    return {
        pid
        for pid, cmd in _children(os.getpid()).items()
        if serving in cmd and f" {SERVE_FLAG} " in cmd
    }


async def test_the_first_launch_after_a_warm_up_goes_to_the_idle_shim(
    state_root: Path, tmp_path: Path
) -> None:
    before = _serving_shims()
    pool = ShimPool()
    scratch = tmp_path / "warm-up"
    (scratch / "left-by-a-killed-agent").mkdir(parents=True)
    try:
        with anyio.fail_after(20):
            await pool.warm_up(scratch)
        assert not scratch.exists()
        idle = _serving_shims() - before
        assert len(idle) == 1, "one shim, idle after the warm-up's launch"
        async with anyio.create_task_group() as tg:
            tg.start_soon(pool.run)  # the agent's task that starts replacements
            first = await pool.launch(state_root / "1-1", python_spec(SLEEPS))
            assert first.identity is not None and first.identity.pid in idle
            with anyio.fail_after(10):
                while len(_serving_shims() - before) < 2:  # a replacement, for the next
                    await anyio.sleep(SPARE_AFTER_S / 4)
                ended = await first.wait()
            tg.cancel_scope.cancel()
        assert ended.exit_code == 0
    finally:
        await pool.aclose()
