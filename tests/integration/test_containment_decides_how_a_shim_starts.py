"""How a job is contained decides how its shim starts, through one interface.

A process group: the shim is one the agent started ahead and feeds launches. A
containment that names a command (a systemd scope, on a host that has one): a shim of the
job's own starts under that command, as `python -I -S -c BOOTSTRAP JOBD_HOME STATE_DIR`,
and is found again by it. Real shims and workloads; `env` stands in for `systemd-run`,
which the test hosts lack.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from jobd.worker.shim.client import ShimPool, adopt, start_shim
from jobd.worker.shim.client.pool import serve_command
from jobd.worker.shim.client.starting import shim_command
from jobd.worker.shim.containment import ProcessGroup, SystemdScope, choose_containment
from jobd.worker.shim.protocol import SHIM_MODULE, LaunchSpec
from tests.integration.supervised import python_spec


class _UnderEnv:
    """A containment whose command is `env`: what a scope's would be, minus the scope."""

    name = "env"

    def shim_command_prefix(self, spec: LaunchSpec) -> list[str] | None:
        return ["env"]


def _command_line(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")[:-1]


@pytest.mark.anyio
async def test_a_process_group_takes_one_of_the_agents_serving_shims(state_root: Path) -> None:
    pool = ShimPool()
    try:
        with anyio.fail_after(10):
            shim = await start_shim(pool, ProcessGroup(), state_root / "42-1", python_spec("pass"))
            assert shim.identity is not None
            assert _command_line(shim.identity.pid) == serve_command()  # the agent's own
            assert (await shim.wait()).exit_code == 0
    finally:
        await pool.aclose()


@pytest.mark.anyio
async def test_a_containment_with_a_command_starts_a_shim_of_the_jobs_own(
    state_root: Path,
) -> None:
    pool = ShimPool()
    state_dir = state_root / "42-1"
    try:
        with anyio.fail_after(10):
            code = "import time; time.sleep(0.5)"
            shim = await start_shim(pool, _UnderEnv(), state_dir, python_spec(code))
            record = shim.record()
            assert record is not None
            assert _command_line(record.shim.pid) == shim_command(SHIM_MODULE, str(state_dir))
            adopted = adopt(state_dir)
            assert adopted is not None and adopted.identity == record.shim
            assert (await shim.wait()).exit_code == 0
    finally:
        await pool.aclose()


def test_one_place_chooses_and_a_scope_names_its_unit() -> None:
    chosen = choose_containment()
    assert isinstance(chosen, ProcessGroup | SystemdScope)
    prefix = SystemdScope().shim_command_prefix(python_spec("pass"))
    assert prefix is not None and "--unit=jobd-job-42-1" in prefix
    assert ProcessGroup().shim_command_prefix(python_spec("pass")) is None
