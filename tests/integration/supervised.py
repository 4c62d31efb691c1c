"""Helpers for the supervisor's tests: real launchers, supervisors and workloads.

The test process becomes a child subreaper (the `child_subreaper` fixture) so that a
supervisor whose launcher was killed is reparented to it and can be reaped here: this
host's pid 1, like many a container's, reaps no orphans.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from jobd.worker.shim.client import Shim, adopt, read_record
from jobd.worker.shim.protocol import LaunchSpec
from jobd.worker.shim.statedir import lock_is_held

PR_SET_CHILD_SUBREAPER = 36

# Launches a supervisor as the agent would, optionally asks it to stop once the workload
# says "ready" on stdout, says "launched", then waits to be killed.
LAUNCHER = """
import json, sys, time
from pathlib import Path
import anyio
from jobd.worker.shim.statedir import lock_is_held
from jobd.worker.shim.client import launch
from jobd.worker.shim.protocol import LaunchSpec
job = launch(Path(sys.argv[1]), LaunchSpec.from_dict(json.loads(sys.argv[2])))
anyio.run(job.started)
stop = json.loads(sys.argv[3])
if stop:
    while b"ready" not in job.stdout_path.read_bytes():
        time.sleep(0.01)
    job.request_stop(stop["grace_s"], stop["reason"])
print("launched", flush=True)
time.sleep(60)
"""

# Ignores SIGTERM, and so does its child (same group), whose pid goes to argv[1].
STUBBORN_WITH_CHILD = """
import signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
child = subprocess.Popen([sys.executable, "-c",
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"])
open(sys.argv[1], "w").write(str(child.pid))
print("ready", flush=True)
time.sleep(60)
"""

# Checkpoints on SIGTERM as the seed asks: prints the sentinel and exits 0.
CHECKPOINTS_ON_SIGTERM = """
import signal, sys, time
def on_term(*_):
    print("jobd-checkpoint-complete", flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
print("ready", flush=True)
time.sleep(60)
"""


def python_spec(code: str, *args: str, grace_s: float = 5.0) -> LaunchSpec:
    return LaunchSpec(
        argv=[sys.executable, "-c", code, *args],
        cwd="/",
        env={"PATH": "/usr/bin:/bin"},
        grace_s=grace_s,
        job_id=42,
        attempt=1,
    )


def start_launcher(
    state_dir: Path, spec: LaunchSpec, stop: dict[str, object] | None = None
) -> subprocess.Popen[bytes]:
    """A launcher process, once its supervisor has started the workload (and asked a stop)."""
    launcher = subprocess.Popen(
        [
            sys.executable,
            "-c",
            LAUNCHER,
            str(state_dir),
            json.dumps(spec.to_dict()),
            json.dumps(stop),
        ],
        stdout=subprocess.PIPE,
    )
    assert launcher.stdout is not None
    assert launcher.stdout.readline() == b"launched\n"
    return launcher


def kill_launcher(launcher: subprocess.Popen[bytes]) -> None:
    launcher.kill()
    launcher.wait()
    assert launcher.stdout is not None
    launcher.stdout.close()


def wait_for(condition: Callable[[], object], within_s: float = 5.0) -> None:
    deadline = time.monotonic() + within_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


def wait_ready(job: Shim) -> None:
    wait_for(lambda: job.stdout_path.exists() and b"ready" in job.stdout_path.read_bytes())


def is_gone(pid: int) -> bool:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # reap it if it was orphaned to us
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.fixture
def child_subreaper() -> Iterator[None]:
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    yield
    libc.prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)


@pytest.fixture
def state_root(tmp_path: Path, child_subreaper: None) -> Iterator[Path]:
    """Where the tests' state directories go; whatever still runs there is ended after."""
    root = tmp_path / "jobs"
    root.mkdir()
    yield root
    for entry in root.iterdir():
        record = read_record(entry)
        if record is None:
            continue
        job = adopt(entry)
        if job is not None and job.is_alive():  # still running: stop it, as an agent would
            job.request_stop(0, "test teardown")
            wait_for(lambda entry=entry: not lock_is_held(entry))
        reap_if_our_child(record.shim.pid)


def reap_if_our_child(pid: int) -> None:
    """Reap pid if it is our child (an orphaned supervisor, say), once it has exited."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            reaped, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return  # not ours, or reaped already
        if reaped:
            return
        time.sleep(0.01)
    raise AssertionError(f"supervisor {pid} did not exit")
