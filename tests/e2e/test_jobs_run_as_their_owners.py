"""Jobs run as the person who submitted them (issue 24 item 2), on real processes: a real
`jobd broker` and two real `jobd worker`s on this host, both root, and real users made
with `useradd` (alice, bob, carol), removed after.

- `narrow` (4 slots) runs only alice's jobs (`--allow-user`); `wide` (2 slots) any user
  its host knows. Both say `RUN-AS owner`.
- alice's job runs as alice: her uid, gid and groups (`/proc/self/status`, `id`), her
  HOME, USER, LOGNAME, umask 077; its checkpoint directory is hers, 0700, under a root
  every user may traverse, and she reaches her own output file by its path.
- bob's job is not placed on narrow, though it has more free slots: it runs on wide,
  and cannot list or read alice's checkpoint directory nor read her output file.
- a job naming no cwd starts in its owner's home.
- a job of a user the workers published but the host has lost since (userdel) fails
  `OwnerUnknown` at launch; one of a user no worker knows waits Unschedulable, naming
  each worker's refusal.

Needs root (to make users and to be a root worker): skipped with the reason otherwise,
failed under CI=true.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e import harness
from tests.e2e.harness import BIN
from tests.local_users import LocalUser, local_users, need_root, reachable_dir

PYTHON = shutil.which("python3", path="/usr/bin:/bin") or "/usr/bin/python3"

# alice's workload: who it is, its checkpoint written, its own output file read back by
# path; then it waits (running) until told to end by a file.
ALICE = """
import os, subprocess, sys, time
status = dict(l.split(":\\t", 1) for l in open("/proc/self/status").read().splitlines()
              if ":\\t" in l)
ckpt = os.environ["JOBD_CHECKPOINT_DIR"]
with open(os.path.join(ckpt, "latest.pt"), "w") as f:
    f.write("alice's weights")
out = os.readlink("/proc/self/fd/1")
print("uid", status["Uid"].split()[0], flush=True)
print("gid", status["Gid"].split()[0], flush=True)
print("groups", status["Groups"].strip(), flush=True)
print("id", subprocess.run(["id", "-un"], capture_output=True, text=True).stdout.strip())
print("home", os.environ["HOME"], os.environ["USER"], os.environ["LOGNAME"])
print("umask", oct(os.umask(0o077)))
print("ckpt", ckpt, flush=True)
print("out", out, flush=True)
print("own-output-readable", open(out).read(3) == "uid", flush=True)
while not os.path.exists(sys.argv[1]):
    time.sleep(0.05)
"""

# bob's workload: tries alice's checkpoint directory, her checkpoint and her output file.
BOB = """
import os, sys
for what, path in (("list", sys.argv[1]), ("read", os.path.join(sys.argv[1], "latest.pt")),
                   ("output", sys.argv[2])):
    try:
        os.listdir(path) if what == "list" else open(path).read()
        print(what, "allowed")
    except PermissionError:
        print(what, "denied")
print("uid", os.getuid())
"""


class Lab(harness.Lab):
    """One broker and two root workers on this host."""

    def __init__(self, root: Path, alice: str) -> None:
        # Owners reach their output files through the workers' state directories, whose
        # parent an operator makes traversable (docs/security.md); jobd opens the rest.
        (root / "states").mkdir()
        (root / "states").chmod(0o711)
        super().__init__(root)
        self.start(
            "narrow", "worker", "--name", "narrow", "--gpus", "none", "--slots", "4",
            "--state-dir", str(root / "states" / "narrow"), "--allow-user", alice,
        )  # fmt: skip
        self.start(
            "wide", "worker", "--name", "wide", "--gpus", "none", "--slots", "2",
            "--state-dir", str(root / "states" / "wide"),
        )  # fmt: skip
        self.wait_workers(2)

    def submit(self, owner: str, code: str, *args: str, cwd: str | None = "/") -> int:
        """A job of `owner`, submitted as an admin may: on the owner's behalf."""
        spec: dict[str, Any] = {"command": [PYTHON, "-c", code, *args]}
        if cwd is not None:
            spec["cwd"] = cwd
        doc = {
            "apiVersion": "jobd/v1",
            "kind": "Job",
            "metadata": {"project": "lab", "owner": owner},
            "spec": spec,
        }
        made: dict[str, Any] = self.api("POST", "/jobs", doc)
        return int(made["metadata"]["id"])

    def get(self, job_id: int) -> dict[str, Any]:
        doc: dict[str, Any] = self.api("GET", f"/jobs/{job_id}")
        return doc

    def wait(self, job_id: int, *phases: str, timeout: float = 30) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while (doc := self.get(job_id))["status"]["phase"] not in phases:
            assert time.monotonic() < deadline, f"job {job_id}: {doc['status']}"
            time.sleep(0.05)
        return doc

    def logs(self, job_id: int) -> dict[str, str]:
        said = subprocess.run(
            [str(BIN / "job"), "logs", str(job_id)], env=self.env, capture_output=True,
            text=True, timeout=30, check=True,
        ).stdout  # fmt: skip
        return dict(line.split(" ", 1) for line in said.splitlines() if " " in line)


@pytest.fixture(scope="module")
def users() -> Iterator[dict[str, LocalUser]]:
    need_root()
    with local_users("alice", "bob", "carol") as made:
        yield made


@pytest.fixture(scope="module")
def lab(users: dict[str, LocalUser]) -> Iterator[Lab]:
    root = reachable_dir("jobd-owners-")
    running = Lab(root, users["alice"].name)
    yield running
    running.close()
    shutil.rmtree(root, ignore_errors=True)


def test_a_user_gone_since_the_worker_said_it_fails_owner_unknown(
    lab: Lab, users: dict[str, LocalUser]
) -> None:
    carol = users["carol"].name
    workers = {w["metadata"]["name"]: w["status"] for w in lab.api("GET", "/workers")["items"]}
    assert carol in workers["wide"]["users"]  # published at registration
    subprocess.run(["userdel", carol], check=True, capture_output=True)  # gone since
    job = lab.submit(carol, "print('never')")
    ended = lab.wait(job, "Failed")
    assert ended["status"]["worker"] == "wide"
    assert ended["status"]["reason"] == "OwnerUnknown"
    assert f"user {carol} does not exist on this host" in ended["status"]["message"]


def test_workers_say_whom_they_run_jobs_as(lab: Lab, users: dict[str, LocalUser]) -> None:
    workers = {w["metadata"]["name"]: w["status"] for w in lab.api("GET", "/workers")["items"]}
    assert workers["narrow"]["runs_as"] == workers["wide"]["runs_as"] == "owner"
    assert workers["narrow"]["users"] == [users["alice"].name]
    assert {users["alice"].name, users["bob"].name, "root"} <= set(workers["wide"]["users"])
    wide = subprocess.run(
        [str(BIN / "job"), "workers", "-o", "wide"], env=lab.env, capture_output=True, text=True
    )
    assert wide.returncode == 0, wide.stderr
    header, *rows = wide.stdout.splitlines()
    assert header.split()[-1] == "RUN-AS"
    assert all(row.split()[-1] == "owner" for row in rows), wide.stdout


def test_alices_job_is_alices_and_bob_reads_nothing_of_it(
    lab: Lab, users: dict[str, LocalUser]
) -> None:
    alice, bob = users["alice"], users["bob"]
    release = lab.root / "release"
    alices = lab.submit(alice.name, ALICE, str(release))
    running = lab.wait(alices, "Running", "Failed")
    assert running["status"]["worker"] == "narrow"  # it has the most free slots
    deadline = time.monotonic() + 30
    while "own-output-readable" not in (said := lab.logs(alices)):
        assert lab.get(alices)["status"]["phase"] == "Running", lab.get(alices)["status"]
        assert time.monotonic() < deadline, said
        time.sleep(0.1)
    assert (said["uid"], said["gid"]) == (str(alice.uid), str(alice.gid))
    groups = {int(g) for g in said["groups"].split()}
    assert alice.group_gid in groups and 0 not in groups
    assert said["id"] == alice.name
    assert said["home"] == f"{alice.home} {alice.name} {alice.name}"
    assert said["umask"] == "0o77"
    assert said["own-output-readable"] == "True"  # she reaches her output by its path
    ckpt = Path(said["ckpt"])
    info = ckpt.stat()
    assert (info.st_uid, info.st_gid, info.st_mode & 0o777) == (alice.uid, alice.gid, 0o700)
    assert (ckpt / "latest.pt").stat().st_uid == alice.uid
    output = Path(said["out"])
    assert (output.stat().st_uid, output.stat().st_mode & 0o777) == (alice.uid, 0o600)

    # bob's job: narrow would take it (more slots free) but runs only alice's.
    bobs = lab.submit(bob.name, BOB, str(ckpt), str(output))
    ended = lab.wait(bobs, "Succeeded", "Failed")
    assert ended["status"]["worker"] == "wide"
    assert lab.logs(bobs) == {
        "list": "denied",
        "read": "denied",
        "output": "denied",
        "uid": str(bob.uid),
    }
    release.touch()
    assert lab.wait(alices, "Succeeded", "Failed")["status"]["phase"] == "Succeeded"


def test_a_job_naming_no_cwd_starts_in_its_owners_home(
    lab: Lab, users: dict[str, LocalUser]
) -> None:
    alice = users["alice"]
    job = lab.submit(alice.name, "import os; print('cwd', os.getcwd())", cwd=None)
    assert lab.wait(job, "Succeeded", "Failed")["status"]["phase"] == "Succeeded"
    assert lab.logs(job) == {"cwd": alice.home}


def test_a_job_of_a_user_no_worker_knows_waits_saying_why(lab: Lab) -> None:
    stranger = f"jt{os.getpid()}nobody"
    job = lab.submit(stranger, "print('never')")
    time.sleep(0.5)
    doc = lab.get(job)
    assert doc["status"]["phase"] == "Pending"
    found = [c for c in doc["status"]["conditions"] if c["reason"] == "Unschedulable"]
    assert found and found[0]["message"] == (
        f"no worker may run it (narrow: user {stranger} does not exist on this host; "
        f"wide: user {stranger} does not exist on this host)"
    )
    lab.api("POST", f"/jobs/{job}/cancel")
