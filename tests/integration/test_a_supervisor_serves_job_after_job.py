"""A supervisor of the launcher's pool serves job after job, and never confuses them.

Real launcher, supervisors and workloads: the second job runs under the same process as
the first, a stop meant for the first (sent late, as an agent that has not yet heard of
its end would) never touches the second, the second's stop leaves the first's state as
it was, and whatever the first left running is dead before its end is told.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from jobd.worker.shim.client import Shim, ShimPool
from jobd.worker.shim.protocol import STATUS_FILE, STOPPING_FILE
from tests.integration.supervised import (
    CHECKPOINTS_ON_SIGTERM,
    is_gone,
    python_spec,
    wait_ready,
)

# Leaves a daemon behind (double fork, own session, deaf to SIGTERM) and exits at once.
LEAVES_A_DAEMON = """
import os, signal, sys, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        open(sys.argv[1], "w").write(str(os.getpid()))
        time.sleep(60)
    os._exit(0)
while not os.path.exists(sys.argv[1]) or not open(sys.argv[1]).read():
    time.sleep(0.01)
"""


async def _next_on_same_supervisor(
    launcher: ShimPool, first: Shim, state_dir: Path, code: str, *args: str
) -> Shim:
    """The next job, launched once the first is over: its supervisor is idle by then."""
    with anyio.fail_after(10):
        await first.wait()
    second = await launcher.launch(state_dir, python_spec(code, *args).replace(job_id=43))
    assert second.identity == first.identity  # one process, two jobs in turn
    return second


@pytest.mark.anyio
async def test_a_stop_for_the_first_job_never_stops_the_second(state_root: Path) -> None:
    launcher = ShimPool()
    try:
        first = await launcher.launch(state_root / "42-1", python_spec("pass"))
        second = await _next_on_same_supervisor(
            launcher, first, state_root / "43-1", CHECKPOINTS_ON_SIGTERM
        )
        wait_ready(second)
        first_status = (first.state_dir / STATUS_FILE).read_bytes()
        first.request_stop(0, "late")  # a stop file in the first's directory, and a poke
        await anyio.sleep(1.0)  # past the supervisor's stop-file poll: a stop would show
        assert second.status() is None and second.stopping() is None
        second.request_stop(5, "preempt")
        with anyio.fail_after(10):
            ended = await second.wait()
        assert ended.stop is not None and ended.stop.reason == "preempt"
        assert ended.exit_code == 0  # it checkpointed on its SIGTERM
        assert (first.state_dir / STATUS_FILE).read_bytes() == first_status
        assert not (first.state_dir / STOPPING_FILE).exists()
    finally:
        await launcher.aclose()


@pytest.mark.anyio
async def test_what_a_job_leaves_behind_is_dead_before_the_next_starts(
    state_root: Path, tmp_path: Path
) -> None:
    launcher = ShimPool()
    daemon_pid_file = tmp_path / "daemon.pid"
    try:
        first = await launcher.launch(
            state_root / "42-1", python_spec(LEAVES_A_DAEMON, str(daemon_pid_file))
        )
        with anyio.fail_after(10):
            ended = await first.wait()
        assert ended.exit_code == 0
        assert is_gone(int(daemon_pid_file.read_text()))  # killed before the end was told
        second = await _next_on_same_supervisor(
            launcher, first, state_root / "43-1", "import sys; sys.exit(4)"
        )
        with anyio.fail_after(10):
            assert (await second.wait()).exit_code == 4
    finally:
        await launcher.aclose()
