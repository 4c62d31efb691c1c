"""A shim running as root starts a job of an owner as that owner (issue 24 item 2).

Real users (`useradd`), a real shim launched as the agent launches one, and a workload
that reads who it is from the kernel (`/proc/self/status`), `id` and its environment:
the owner's uid, gid and supplementary groups, HOME/USER/LOGNAME from the passwd entry,
umask 077, and output files that are the owner's and 0600. A cwd the owner may not
enter fails the start naming it; an owner this host does not know fails it too; a job
of no owner still runs as root.
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from jobd.worker.shim.client import launch
from jobd.worker.shim.limits import RSS_WATCH
from jobd.worker.shim.protocol import ExitStatus, LaunchSpec
from tests.local_users import LocalUser, local_users, reachable_dir

pytestmark = pytest.mark.anyio

WHO = """
import os, subprocess
status = dict(line.split(":\\t", 1) for line in open("/proc/self/status").read().splitlines()
              if ":\\t" in line)
print("uid", status["Uid"].split()[0])
print("gid", status["Gid"].split()[0])
print("groups", status["Groups"].strip())
print("umask", oct(os.umask(0)))
print("cwd", os.getcwd())
for key in ("HOME", "USER", "LOGNAME"):
    print(key, os.environ.get(key, ""))
print("id", subprocess.run(["id", "-un"], capture_output=True, text=True).stdout.strip())
print("cores", status["Cpus_allowed_list"].strip())
"""


# The workloads run as the owner: an interpreter every user may run, not this venv's
# (which may sit under root's 0700 home).
PYTHON = shutil.which("python3", path="/usr/bin:/bin") or "/usr/bin/python3"


def python_spec(code: str) -> LaunchSpec:
    return LaunchSpec([PYTHON, "-c", code], "/", {"PATH": "/usr/bin:/bin"}, 5.0, 42, 1)


@pytest.fixture(scope="module")
def alice() -> Iterator[LocalUser]:
    with local_users("alice") as users:
        yield users["alice"]


@pytest.fixture
def state_root() -> Iterator[Path]:
    root = reachable_dir("jobd-shim-owner-")
    yield root
    shutil.rmtree(root, ignore_errors=True)


async def _run(state_dir: Path, spec: LaunchSpec) -> ExitStatus:
    job = launch(state_dir, spec)
    with anyio.fail_after(20):
        return await job.wait()


def _said(state_dir: Path) -> dict[str, str]:
    lines = (state_dir / "stdout").read_text().splitlines()
    return dict(line.split(" ", 1) if " " in line else (line, "") for line in lines)


async def test_the_workload_is_the_owner_with_their_groups_home_and_umask(
    alice: LocalUser, state_root: Path
) -> None:
    state = state_root / "state"
    spec = python_spec(WHO).replace(owner=alice.name, cwd=alice.home)
    ended = await _run(state, spec)
    assert ended.exit_code == 0, (state / "stderr").read_text()
    said = _said(state)
    assert said["uid"] == str(alice.uid) and said["gid"] == str(alice.gid)
    assert {alice.gid, alice.group_gid} <= {int(g) for g in said["groups"].split()}
    assert 0 not in {int(g) for g in said["groups"].split()}  # none of root's groups
    assert said["umask"] == "0o77"
    assert said["cwd"] == alice.home
    assert (said["HOME"], said["USER"], said["LOGNAME"]) == (alice.home, alice.name, alice.name)
    assert said["id"] == alice.name
    for name in ("stdout", "stderr"):
        info = (state / name).stat()
        assert (info.st_uid, info.st_gid) == (alice.uid, alice.gid)
        assert stat.S_IMODE(info.st_mode) == 0o600


async def test_an_owners_job_keeps_the_cores_its_limits_give_it(
    alice: LocalUser, state_root: Path
) -> None:
    core = sorted(os.sched_getaffinity(0))[-1]
    state = state_root / "state"
    limits = {"cpus": [core], "memory_via": RSS_WATCH}
    ended = await _run(state, python_spec(WHO).replace(owner=alice.name, limits=limits))
    assert ended.exit_code == 0, (state / "stderr").read_text()
    said = _said(state)
    assert (said["uid"], said["cores"]) == (str(alice.uid), str(core))


async def test_a_job_of_no_owner_runs_as_the_shims_user(state_root: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("the shim's user is root only when the tests run as root")
    state = state_root / "state"
    ended = await _run(state, python_spec(WHO))
    assert ended.exit_code == 0
    assert _said(state)["uid"] == "0"


async def test_a_cwd_the_owner_may_not_enter_fails_the_start_naming_it(
    alice: LocalUser, state_root: Path
) -> None:
    private = state_root / "roots-only"
    private.mkdir(mode=0o700)
    state = state_root / "state"
    ended = await _run(state, python_spec(WHO).replace(owner=alice.name, cwd=str(private)))
    assert ended.exit_code == 127
    assert ended.error is not None
    assert f"entering {private} as {alice.name}" in ended.error
    assert "Permission denied" in ended.error
    assert (state / "stdout").read_text() == ""  # nothing of the workload ran


async def test_an_owner_this_host_does_not_know_fails_the_start(state_root: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("only a root shim runs jobs as their owners")
    state = state_root / "state"
    spec = python_spec(WHO).replace(owner="jobd-nobody-here")
    ended = await _run(state, spec)
    assert ended.exit_code == 127
    assert ended.error is not None and "user jobd-nobody-here does not exist" in ended.error


async def test_a_missing_command_is_named_as_for_any_job(
    alice: LocalUser, state_root: Path
) -> None:
    state = state_root / "state"
    spec = LaunchSpec(["no-such-command-here"], "/", {"PATH": "/usr/bin:/bin"}, 5.0, 1, 1)
    ended = await _run(state, spec.replace(owner=alice.name))
    assert ended.exit_code == 127
    assert ended.error is not None and "No such file or directory" in ended.error
