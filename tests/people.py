"""Real Unix users for a test, and running code as one of them.

Adding users needs root: without it a test skips, saying why, and fails under CI=true, so
CI cannot pass by not testing. Each user and group has a name of its own (a random part),
so tests running in parallel never meet, and is removed afterwards.

`as_user` runs a function in a forked child that has become the user (initgroups,
setgid, setuid), and hands back what it returned. The child can open no file the user
may not, so what the function imports must be imported before (call it once as root).
"""

from __future__ import annotations

import json
import os
import pwd
import secrets
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

__all__ = ["as_user", "local_users", "need_root"]


def need_root(why: str) -> None:
    if os.geteuid() == 0:
        return
    reason = f"{why} needs root"
    if os.environ.get("CI", "").strip().lower() in {"true", "1"}:
        pytest.fail(f"CI=true and {reason}", pytrace=False)
    pytest.skip(reason)


@contextmanager
def local_users(
    *roles: str, groups: dict[str, tuple[str, ...]] | None = None
) -> Iterator[dict[str, str]]:
    """A user per role and a group per key of `groups` (whose members are the roles it
    names), by their names on this host: `{"alice": "jd3f9a1calice", ...}`."""
    need_root("adding Unix users")
    tag = "jd" + secrets.token_hex(3)
    groups = groups or {}
    names = {role: f"{tag}{role}"[:32] for role in [*roles, *groups]}
    made: list[list[str]] = []
    try:
        for group in groups:
            _run(["groupadd", names[group]])
            made.append(["groupdel", names[group]])
        for role in roles:
            joined = ",".join(names[g] for g, members in groups.items() if role in members)
            extra = ["-G", joined] if joined else []
            _run(
                [
                    "useradd",
                    "-M",
                    "-d",
                    "/nonexistent",
                    "-s",
                    "/usr/sbin/nologin",
                    *extra,
                    names[role],
                ]
            )
            made.append(["userdel", names[role]])
        yield names
    finally:
        for undo in reversed(made):
            subprocess.run(undo, capture_output=True, check=False)


def as_user(name: str, run: Callable[[], Any]) -> Any:
    """What `run()` returns (JSON-able), run in a child process as the user `name`."""
    entry = pwd.getpwnam(name)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: become the user, run, say what came of it, and exit
        code = 0
        try:
            os.close(read)
            os.initgroups(name, entry.pw_gid)
            os.setgid(entry.pw_gid)
            os.setuid(entry.pw_uid)
            said = json.dumps({"value": run()})
        except BaseException as exc:
            said, code = json.dumps({"error": f"{type(exc).__name__}: {exc}"}), 1
        os.write(write, said.encode())
        os._exit(code)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        said = pipe.read()
    os.waitpid(pid, 0)
    answer = json.loads(said)
    if "error" in answer:
        raise AssertionError(f"as {name}: {answer['error']}")
    return answer["value"]


def _run(argv: list[str]) -> None:
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        reason = f"{' '.join(argv)} failed: {done.stderr.strip()}"
        if os.environ.get("CI", "").strip().lower() in {"true", "1"}:
            pytest.fail(f"CI=true and {reason}", pytrace=False)
        pytest.skip(reason)
