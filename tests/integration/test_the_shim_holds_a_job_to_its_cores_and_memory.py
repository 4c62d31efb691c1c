"""A serving shim holds its job to the limits in the launch spec (jobd.worker.shim.limits):
real shims and workloads.

- The workload runs on its cores from its first instruction (its Cpus_allowed_list), and
  the shim, serving the next job, is back on every core it had.
- A job allocating past its memory is killed and its end says so with the peak, while a
  neighbour with no limits runs on: watched (rss-watch, anywhere) and by a cgroup (the
  v2 or v1 memory controller, as root; skipped elsewhere with the reason, failed under
  CI=true). The job's cgroup is gone once it is over, and the shim was never left in it.
- A job under its memory ends as it exited, with nothing said.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import anyio
import pytest

from jobd.worker.limits import Enforcement, detect_enforcement
from jobd.worker.shim.client import Shim, ShimPool
from jobd.worker.shim.limits import RSS_WATCH, Limits
from jobd.worker.shim.protocol import ExitStatus, LaunchSpec
from tests.integration.supervised import python_spec

pytestmark = pytest.mark.anyio

MIB = 1 << 20
# Grows by 16 MiB every 20 ms (to 3 GiB if nothing stops it), touching every page.
HOG = """
import time
held = []
for _ in range(192):
    held.append(bytearray(16 << 20))
    time.sleep(0.02)
"""
SAYS_ITS_CORES = (
    "import os; print(open('/proc/self/status').read().split('Cpus_allowed_list:')[1]"
    ".split()[0], os.environ.get('OMP_NUM_THREADS'))"
)
SLEEPS = "import time; print('ready', flush=True); time.sleep(60)"


@pytest.fixture
async def pool(state_root: Path) -> AsyncIterator[ShimPool]:
    """The agent's shims, closed before state_root reaps them (they are our children)."""
    running = ShimPool()
    yield running
    await running.aclose()


def _spec(code: str, limits: Limits | None, job_id: int = 42) -> LaunchSpec:
    spec = python_spec(code)
    limits_doc = None if limits is None else limits.to_dict()
    return spec.replace(job_id=job_id, limits=limits_doc)


async def _run(pool: ShimPool, state_dir: Path, spec: LaunchSpec) -> tuple[Shim, ExitStatus]:
    shim = await pool.launch(state_dir, spec)
    with anyio.fail_after(30):
        return shim, await shim.wait()


def _cgroup_of(pid: int) -> str:
    return Path(f"/proc/{pid}/cgroup").read_text()


async def test_the_workload_runs_on_its_cores_and_the_shim_is_back_on_all_of_its(
    pool: ShimPool, state_root: Path
) -> None:
    every = sorted(os.sched_getaffinity(0))
    core = every[-1]
    spec = _spec(SAYS_ITS_CORES, Limits(cpus=[core]))

    shim, end = await _run(pool, state_root / "42-1", spec)

    assert (end.exit_code, end.memory_exceeded) == (0, None)
    assert (state_root / "42-1" / "stdout").read_text().split()[0] == str(core)
    assert shim.identity is not None
    assert sorted(os.sched_getaffinity(shim.identity.pid)) == every  # idle, for the next job


async def _over_its_memory_while_a_neighbour_runs(
    pool: ShimPool, state_root: Path, limits: Limits
) -> tuple[Shim, ExitStatus]:
    neighbour = await pool.launch(state_root / "7-1", _spec(SLEEPS, None, job_id=7))
    shim, end = await _run(pool, state_root / "42-1", _spec(HOG, limits))
    assert neighbour.is_alive(), "the neighbour with no limits runs on"
    assert end.signal_name == "SIGKILL"
    assert end.memory_exceeded is not None
    assert "peak" in end.memory_exceeded and "limit 64MiB" in end.memory_exceeded
    neighbour.request_stop(0, "test over")
    return shim, end


async def test_a_watched_job_over_its_memory_is_killed_and_says_its_peak(
    pool: ShimPool, state_root: Path
) -> None:
    limits = Limits(memory=64 * MIB, memory_via=RSS_WATCH)

    _, end = await _over_its_memory_while_a_neighbour_runs(pool, state_root, limits)

    assert end.memory_exceeded is not None and "peak" in end.memory_exceeded


@pytest.fixture
def cgroups(tmp_path: Path) -> Iterator[Enforcement]:
    """A memory cgroup this test may make job cgroups under (removed after)."""
    worker = f"test-{os.getpid()}-{tmp_path.name}"
    enforcement = detect_enforcement(worker, "auto", ())
    if enforcement.memory == RSS_WATCH:
        reason = "no memory cgroup may be made here (as root, with v1 or delegated v2)"
        if os.environ.get("CI", "").strip().lower() in {"true", "1"}:
            pytest.fail(f"CI=true and {reason}", pytrace=False)
        pytest.skip(reason)
    assert enforcement.cgroup_root is not None and enforcement.cgroup_parent is not None
    yield enforcement
    parent = Path(enforcement.cgroup_root, enforcement.cgroup_parent.lstrip("/"))
    for child in parent.iterdir() if parent.is_dir() else []:
        if child.is_dir():
            child.rmdir()
    parent.rmdir()


async def test_a_job_over_the_memory_of_its_cgroup_is_killed_and_its_cgroup_removed(
    pool: ShimPool, state_root: Path, cgroups: Enforcement
) -> None:
    limits = cgroups.limits(None, 64 * MIB)
    before = _cgroup_of(os.getpid())

    shim, _ = await _over_its_memory_while_a_neighbour_runs(pool, state_root, limits)

    assert cgroups.cgroup_root is not None and cgroups.cgroup_parent is not None
    job_cgroup = Path(cgroups.cgroup_root, cgroups.cgroup_parent.lstrip("/"), "42-1")
    assert not job_cgroup.exists()
    assert shim.identity is not None
    assert _cgroup_of(shim.identity.pid) == before  # never left in the job's cgroup


async def test_a_job_under_its_memory_ends_as_it_exited(
    pool: ShimPool, state_root: Path, cgroups: Enforcement
) -> None:
    code = "x = bytearray(8 << 20); print(open('/proc/self/cgroup').read())"
    spec = _spec(code, cgroups.limits(None, 256 * MIB))

    _, end = await _run(pool, state_root / "42-1", spec)

    assert (end.exit_code, end.memory_exceeded) == (0, None)
    own = f"{cgroups.cgroup_parent}/42-1"
    assert own in (state_root / "42-1" / "stdout").read_text()  # it ran in its cgroup
