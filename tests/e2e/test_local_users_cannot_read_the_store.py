"""Another local user reads nothing `jobd dev` writes: not the store, its WAL (where a
pending job's HF_TOKEN sits before it is scrubbed), events.jsonl or a job's log. The
directories are 0700 and the files 0600 (CONTRACT.md §2), checked by a real unprivileged
user reading them with `setpriv`; a path left wider is named in a warning at the next
start. A job's own files keep the umask jobd was started with.

Needs root (to make the user and to become it): skipped with the reason otherwise, and
failed under CI=true, where root is what the runner gives.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.harness import Jobd, manifest, start_jobd, stop_jobd, write_script

OUTSIDER = "jobd-outsider"


def _need_root() -> None:
    if os.geteuid() != 0:
        if os.environ.get("CI") == "true":
            pytest.fail("CI runs this test as root: another local user is needed to read")
        pytest.skip("needs root: to make another local user and read as it")
    if shutil.which("useradd") is None or shutil.which("setpriv") is None:
        pytest.skip("needs useradd and setpriv (util-linux) to read as another user")


def _outsider() -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(OUTSIDER)
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", OUTSIDER],
            check=True,
            capture_output=True,
        )
        return pwd.getpwnam(OUTSIDER)


def _read_as(user: pwd.struct_passwd, path: Path) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [
            "setpriv",
            f"--reuid={user.pw_uid}",
            f"--regid={user.pw_gid}",
            "--clear-groups",
            "cat",
            str(path),
        ],
        capture_output=True,
        timeout=30,
    )


@pytest.fixture(scope="module")
def outsider() -> pwd.struct_passwd:
    _need_root()
    return _outsider()


@pytest.fixture(scope="module")
def root() -> Iterator[Path]:
    # Not under pytest's own 0700 directory: the outsider must reach jobd's directories
    # for their modes to be what stops it, as in a home directory of mode 0755.
    path = Path(tempfile.mkdtemp(prefix="jobd-modes-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def ran_a_job(outsider: pwd.struct_passwd, root: Path) -> Iterator[tuple[Jobd, int]]:
    jobd = start_jobd(root, "--slots", "1", "--keep-job-files")
    try:
        argv = write_script(root, "job.py", "open('mine.txt', 'w').write('x')\nprint('out')\n")
        env = {"HF_TOKEN": "hf_not_for_others"}
        jobd.ok("apply", "-f", "-", input=manifest("m", argv, cwd=str(root), env=env))
        job_id = int(jobd.get("m")["metadata"]["id"])
        jobd.wait_phase(job_id, "Succeeded")
        yield jobd, job_id
    finally:
        stop_jobd(jobd)


def test_no_other_user_reads_the_store_its_wal_the_events_or_a_log(
    outsider: pwd.struct_passwd, ran_a_job: tuple[Jobd, int]
) -> None:
    jobd, job_id = ran_a_job
    data, logs = jobd.root / "data", jobd.root / "logs"
    files = [
        data / "jobd.db",
        data / "jobd.db-wal",
        logs / "events.jsonl",
        logs / "jobs" / f"{job_id}.log",
    ]
    for path in files:
        assert path.is_file(), path
        read = _read_as(outsider, path)
        assert read.returncode != 0 and b"Permission denied" in read.stderr, path


def test_every_directory_is_0700_and_every_file_0600(ran_a_job: tuple[Jobd, int]) -> None:
    jobd, _ = ran_a_job
    wider = []
    for top in (jobd.root / "data", jobd.root / "logs"):
        for path in [top, *top.rglob("*")]:
            mode = stat.S_IMODE(path.lstat().st_mode)
            if mode & 0o077:
                wider.append(f"{path.relative_to(jobd.root)} {mode:04o}")
    assert wider == []


def test_a_jobs_own_files_keep_the_umask_jobd_was_started_with(
    ran_a_job: tuple[Jobd, int],
) -> None:
    jobd, _ = ran_a_job
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE((jobd.root / "mine.txt").stat().st_mode) == 0o666 & ~umask


def test_a_path_left_wider_is_named_at_the_next_start(
    ran_a_job: tuple[Jobd, int], root: Path
) -> None:
    stop_jobd(ran_a_job[0])
    wide = [root / "logs" / "events.jsonl", root / "data"]
    (root / "logs" / "events.jsonl").chmod(0o644)
    (root / "data").chmod(0o755)
    again = start_jobd(root, "--slots", "1")
    stop_jobd(again)
    warnings = [
        json.loads(line)
        for line in (root / "dev.log").read_text().splitlines()
        if line.startswith("{") and '"file_mode_too_wide"' in line
    ]
    named = {w["path"]: w for w in warnings}
    for path in wide:
        assert str(path) in named, warnings
        assert named[str(path)]["level"] == "warning"
        assert named[str(path)]["fix"] == f"chmod go-rwx {path}"
    assert named[str(root / "data")]["mode"] == "0755"
