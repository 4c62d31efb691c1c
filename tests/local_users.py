"""Real Unix users for the tests that run jobs as their owners: made with `useradd` under
names unique to this test run, each with a home directory of its own and a
supplementary group, and removed (with their homes and groups) afterwards.

Making users needs root: `need_root()` skips with the reason otherwise, and fails
under CI=true, where the runner is root.
"""

from __future__ import annotations

import grp
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

__all__ = ["LocalUser", "local_users", "need_root", "reachable_dir"]


@dataclass(frozen=True)
class LocalUser:
    name: str
    uid: int
    gid: int
    home: str
    group: str  # a supplementary group it is a member of (not its primary one)
    group_gid: int


def need_root() -> None:
    if os.geteuid() != 0:
        if os.environ.get("CI") == "true":
            pytest.fail("CI runs this test as root: it makes real users and runs jobs as them")
        pytest.skip("needs root: to make real users and run jobs as them")
    if shutil.which("useradd") is None or shutil.which("groupadd") is None:
        pytest.skip("needs useradd and groupadd (shadow-utils) to make real users")


def reachable_dir(prefix: str) -> Path:
    """A fresh directory under /tmp that every user may traverse (0711): pytest's own
    tmp_path is under a 0700 directory of root's, which no owner could reach."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    path.chmod(0o711)
    return path


@contextmanager
def local_users(*roles: str) -> Iterator[dict[str, LocalUser]]:
    """A user per role (`alice`, `bob`), named `jt<pid><role>`, and a group `jt<pid><role>g`
    each is a supplementary member of; all removed on exit."""
    need_root()
    homes = reachable_dir("jobd-homes-")
    made: dict[str, LocalUser] = {}
    try:
        for role in roles:
            name, group = f"jt{os.getpid()}{role}", f"jt{os.getpid()}{role}g"
            _run("groupadd", group)
            home = homes / name
            _run("useradd", "--create-home", "--home-dir", str(home), "-G", group, name)
            entry = pwd.getpwnam(name)
            made[role] = LocalUser(
                name, entry.pw_uid, entry.pw_gid, entry.pw_dir, group, grp.getgrnam(group).gr_gid
            )
        yield made
    finally:
        for user in made.values():
            subprocess.run(["userdel", user.name], capture_output=True, check=False)
            subprocess.run(["groupdel", user.group], capture_output=True, check=False)
        for role in roles:  # a role whose useradd failed half-way
            subprocess.run(["groupdel", f"jt{os.getpid()}{role}g"], capture_output=True)
        shutil.rmtree(homes, ignore_errors=True)


def _run(*argv: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {done.stderr.strip()}")
