"""The workload runners, against real processes and real signals.

Every test runs once per runner; the systemd scope variant skips on hosts without a
user systemd. The test process is made a child subreaper so that killed grandchildren
are reparented to it and can be reaped here: otherwise, on hosts whose pid 1 does not
reap orphans, they would linger as zombies and still answer os.kill(pid, 0).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import anyio
import anyio.abc
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream

from jobd.worker.runner import (
    ExitResult,
    Handle,
    LaunchSpec,
    ProcessGroupRunner,
    Runner,
    SystemdScopeRunner,
    detect_runner,
)

PR_SET_CHILD_SUBREAPER = 36

SLEEP_FOREVER = "import time; print('ready', flush=True); time.sleep(60)"

EXIT_ZERO_ON_SIGTERM = """
import signal, sys, time
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
print("ready", flush=True)
time.sleep(60)
"""

# Ignores SIGTERM and leaves a child (pid written to argv[1]) that ignores it too.
STUBBORN_WITH_CHILD = """
import signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
child = subprocess.Popen([sys.executable, "-c",
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"])
with open(sys.argv[1], "w") as f:
    f.write(str(child.pid))
print("ready", flush=True)
time.sleep(60)
"""

# Exits 0 at once, leaving a grandchild that holds our stdout pipe open.
EXIT_LEAVING_GRANDCHILD = """
import subprocess, sys
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
print(child.pid, flush=True)
"""


@pytest.fixture(params=["procgroup", "systemd"])
def runner(request: pytest.FixtureRequest) -> Runner:
    if request.param == "procgroup":
        return ProcessGroupRunner()
    if detect_runner().name != "systemd":
        pytest.skip("systemd-run --user --scope does not work here (no user systemd instance)")
    return SystemdScopeRunner()


@pytest.fixture(autouse=True)
def child_subreaper() -> Iterator[None]:
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    yield
    libc.prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)


def python_spec(
    code: str, *args: str, cwd: str = "/", env: dict[str, str] | None = None
) -> LaunchSpec:
    return LaunchSpec(
        argv=[sys.executable, "-c", code, *args],
        cwd=cwd,
        env={"PATH": "/usr/bin:/bin"} if env is None else env,
        unit_name=f"jobd-test-{uuid.uuid4().hex[:12]}",
    )


@contextlib.asynccontextmanager
async def started(runner: Runner, spec: LaunchSpec) -> AsyncIterator[Handle]:
    handle = await runner.start(spec)
    try:
        yield handle
    finally:
        await handle.stop(grace_s=0)
        await handle.stdout.aclose()
        await handle.stderr.aclose()


async def read_line(stream: anyio.abc.ByteReceiveStream) -> bytes:
    with anyio.fail_after(5):
        return await BufferedByteReceiveStream(stream).receive_until(b"\n", 65536)


async def read_all(stream: anyio.abc.ByteReceiveStream) -> bytes:
    chunks = []
    with anyio.fail_after(5):
        async for chunk in stream:
            chunks.append(chunk)
    return b"".join(chunks)


def is_gone(pid: int) -> bool:
    # Reap it if it was orphaned to us (see the module docstring).
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def assert_gone_soon(pid: int, within_s: float = 3.0) -> None:
    deadline = time.monotonic() + within_s
    while not is_gone(pid):
        assert time.monotonic() < deadline, f"process {pid} survived"
        time.sleep(0.02)


@pytest.mark.anyio
async def test_exit_code_and_output_are_reported(runner: Runner) -> None:
    code = "import sys; sys.stdout.write('out'); sys.stderr.write('err'); sys.exit(3)"
    async with started(runner, python_spec(code)) as handle:
        with anyio.fail_after(5):
            result = await handle.wait()
        assert result == ExitResult(exit_code=3, signal=None)
        assert not result.ok
        assert await handle.wait() == result
        assert await read_all(handle.stdout) == b"out"
        assert await read_all(handle.stderr) == b"err"


@pytest.mark.anyio
async def test_zero_exit_is_ok(runner: Runner) -> None:
    async with started(runner, python_spec("pass")) as handle:
        with anyio.fail_after(5):
            result = await handle.wait()
        assert result == ExitResult(exit_code=0, signal=None)
        assert result.ok


@pytest.mark.anyio
async def test_death_by_signal_is_reported(runner: Runner) -> None:
    code = "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"
    async with started(runner, python_spec(code)) as handle:
        with anyio.fail_after(5):
            assert await handle.wait() == ExitResult(exit_code=None, signal=signal.SIGKILL)


@pytest.mark.anyio
async def test_workload_sees_exactly_the_given_env_and_cwd(runner: Runner, tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "JOBD_TEST_VAR": "hello world", "EMPTY": ""}
    # /proc/self/environ is what execve received, before Python adjusts anything.
    code = (
        "import json, os; print(json.dumps({'cwd': os.getcwd(), "
        "'environ': open('/proc/self/environ', 'rb').read().decode()}))"
    )
    async with started(runner, python_spec(code, cwd=str(tmp_path), env=env)) as handle:
        seen = json.loads(await read_all(handle.stdout))
        assert seen["cwd"] == os.path.realpath(tmp_path)
        entries = [e for e in seen["environ"].split("\0") if e]
        assert dict(e.split("=", 1) for e in entries) == env


@pytest.mark.anyio
async def test_stop_returns_clean_exit_of_a_workload_that_handles_sigterm(runner: Runner) -> None:
    async with started(runner, python_spec(EXIT_ZERO_ON_SIGTERM)) as handle:
        assert await read_line(handle.stdout) == b"ready"
        begun = time.monotonic()
        result = await handle.stop(grace_s=10)
        assert result == ExitResult(exit_code=0, signal=None)
        assert time.monotonic() - begun < 2


@pytest.mark.anyio
async def test_stop_kills_workload_and_child_that_ignore_sigterm(
    runner: Runner, tmp_path: Path
) -> None:
    child_pid_file = tmp_path / "child.pid"
    spec = python_spec(STUBBORN_WITH_CHILD, str(child_pid_file))
    async with started(runner, spec) as handle:
        assert await read_line(handle.stdout) == b"ready"
        child_pid = int(child_pid_file.read_text())
        begun = time.monotonic()
        result = await handle.stop(grace_s=0.5)
        assert 0.5 <= time.monotonic() - begun < 3
        assert result == ExitResult(exit_code=None, signal=signal.SIGKILL)
        assert_gone_soon(handle.pid)
        assert_gone_soon(child_pid)


@pytest.mark.anyio
async def test_grandchild_left_behind_by_a_normal_exit_is_killed(runner: Runner) -> None:
    async with started(runner, python_spec(EXIT_LEAVING_GRANDCHILD)) as handle:
        # The grandchild keeps stdout open: wait() must not hang on the pipe.
        with anyio.fail_after(5):
            assert await handle.wait() == ExitResult(exit_code=0, signal=None)
        grandchild_pid = int(await read_line(handle.stdout))
        assert_gone_soon(grandchild_pid)


@pytest.mark.anyio
async def test_stop_after_exit_returns_the_same_result(runner: Runner) -> None:
    async with started(runner, python_spec("import sys; sys.exit(7)")) as handle:
        with anyio.fail_after(5):
            result = await handle.wait()
        assert await handle.stop(grace_s=0.5) == result == ExitResult(exit_code=7, signal=None)


@pytest.mark.anyio
async def test_recovered_handle_stops_a_live_workload(runner: Runner) -> None:
    async with started(runner, python_spec(SLEEP_FOREVER)) as handle:
        assert await read_line(handle.stdout) == b"ready"
        state = json.loads(json.dumps(handle.state()))
        assert state["runner"] == runner.name
        recovered = await runner.recover(state)
        assert recovered is not None
        assert (recovered.pid, recovered.unit_name) == (handle.pid, handle.unit_name)
        with pytest.raises(anyio.EndOfStream):
            await recovered.stdout.receive()
        with anyio.fail_after(5):
            assert await recovered.stop(grace_s=2) == ExitResult(exit_code=None, signal=None)
            assert await handle.wait() == ExitResult(exit_code=None, signal=signal.SIGTERM)


@pytest.mark.anyio
async def test_recover_of_a_finished_workload_returns_none(runner: Runner) -> None:
    async with started(runner, python_spec("pass")) as handle:
        with anyio.fail_after(5):
            await handle.wait()
        assert await runner.recover(handle.state()) is None


@pytest.mark.anyio
async def test_recover_does_not_mistake_a_recycled_pid_for_the_job() -> None:
    runner = ProcessGroupRunner()
    async with started(runner, python_spec(SLEEP_FOREVER)) as handle:
        assert await read_line(handle.stdout) == b"ready"
        stale = {**handle.state(), "start_time": -5}
        assert await runner.recover(stale) is None
        assert not is_gone(handle.pid)


def test_detect_runner_picks_a_runner_that_works_here() -> None:
    runner = detect_runner()
    assert runner.name in {"procgroup", "systemd"}
    assert type(detect_runner()) is type(runner)
