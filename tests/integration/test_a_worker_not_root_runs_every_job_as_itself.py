"""A worker that is not root cannot change users: it runs every job as itself, as the seed
has it, says so (`runs_as` is its own user's name), and publishes no user list unless
`--allow-user` names some; a job of an owner is started as the worker's user, whoever
the owner is, and nothing fails for it (issue 24 item 2).

Run for real as another user (made with `useradd`): the worker's own modules, read by
the system's python3 as that user. Needs root to make the user: skipped otherwise, and
failed under CI=true.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.local_users import LocalUser, local_users

REPO = Path(__file__).resolve().parents[2]
PYTHON = shutil.which("python3", path="/usr/bin:/bin") or "/usr/bin/python3"

ASK = """
import json
from jobd.worker.owners import published_users, run_as, runs_as_owners, runs_as_text
print(json.dumps({
    "owners": runs_as_owners(),
    "runs_as": runs_as_text(),
    "users": published_users(None),
    "allowed": published_users(["bob", "alice"]),
    "run_as_root": run_as("root", None),
    "run_as_alice": run_as("alice", None),
}))
"""


@pytest.fixture(scope="module")
def worker_user() -> Iterator[LocalUser]:
    with local_users("worker") as users:
        yield users["worker"]


def test_a_worker_not_root_says_so_and_runs_jobs_as_itself(worker_user: LocalUser) -> None:
    if not REPO.stat().st_mode & 0o005 or not REPO.parent.stat().st_mode & 0o001:
        pytest.skip(f"{REPO} is not readable by other users, so no other user can load jobd")
    said = subprocess.run(
        [
            "setpriv",
            f"--reuid={worker_user.uid}",
            f"--regid={worker_user.gid}",
            "--init-groups",
            PYTHON,
            "-I",
            "-c",
            f"import sys; sys.path.insert(0, {str(REPO)!r}); exec({ASK!r})",
        ],
        capture_output=True,
        text=True,
        timeout=30,
        cwd="/",
    )
    assert said.returncode == 0, said.stderr
    assert json.loads(said.stdout) == {
        "owners": False,
        "runs_as": worker_user.name,
        "users": None,  # any owner may be placed here: it runs them all as itself
        "allowed": ["alice", "bob"],  # --allow-user narrows it all the same
        "run_as_root": None,  # as the worker's user: nothing to refuse here
        "run_as_alice": None,
    }
