"""People on the broker's host use `job` over its Unix socket, known by their uid.

The real `jobd dev` with `--socket`, real Unix users made for the test (root only: it
skips elsewhere and fails under CI=true), and the real `job` command run in a child
process that has become each user. No token is made or given: alice sees only her
projects' jobs, may not cancel bob's (403, and nothing changes), a forged owner and a
header claiming another identity are ignored, a project admin changes others' jobs, and
root and the admin group are admins.
"""

from __future__ import annotations

import http.client
import json
import pwd
import shutil
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from jobd.cli.job_main import cli
from tests.e2e.harness import Jobd, start_jobd, stop_jobd
from tests.people import as_user, local_users


@pytest.fixture(scope="module")
def users() -> Iterator[dict[str, str]]:
    groups = {"lab": ("alice", "dana"), "admins": ("dana",)}
    with local_users("alice", "bob", "carol", "dana", groups=groups) as names:
        yield names


@pytest.fixture(scope="module")
def sock_dir() -> Iterator[Path]:
    """Where the socket goes: beside no private directory (pytest's are 0700)."""
    where = Path(tempfile.mkdtemp(prefix="jobd-people-"))
    where.chmod(0o755)
    yield where
    shutil.rmtree(where, ignore_errors=True)


@pytest.fixture(scope="module")
def jobd(
    tmp_path_factory: pytest.TempPathFactory, users: dict[str, str], sock_dir: Path
) -> Iterator[Jobd]:
    path = sock_dir / "run" / "jobd.sock"
    running = start_jobd(
        tmp_path_factory.mktemp("jobd"),
        "--slots",
        "4",
        "--socket",
        str(path),
        "--admin-group",
        users["admins"],
    )
    running.extra["socket"] = path
    projects = [
        _project("pa", members=[users["alice"]]),
        _project("pb", members=[users["bob"]]),
        _project("both", members=[users["alice"], users["bob"]], admins=[users["carol"]]),
        _project("grouped", members=["@" + users["lab"]]),
    ]
    with running.api() as api:
        applied = api.post("/apply", json={"documents": projects})
        assert applied.status_code == 200, applied.text
    _warm(running)
    yield running
    stop_jobd(running)


def _project(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "jobd/v1", "kind": "Project", "metadata": {"name": name}, "spec": spec}


def _env(jobd: Jobd) -> dict[str, str]:
    """`job`'s environment: the socket, and no server, token or readable config."""
    return {
        "JOBD_SOCKET": str(jobd.extra["socket"]),
        "JOBD_URL": "",
        "JOBD_TOKEN": "",
        "JOBD_CONFIG": "/nonexistent/jobd/config.yaml",
    }


def _job(jobd: Jobd, *args: str) -> tuple[int, str]:
    """`job ARGS` in this process: its exit code, and what it printed (stdout and stderr)."""
    result = CliRunner().invoke(cli, list(args), env=_env(jobd), prog_name="job")
    return result.exit_code, result.output


def _warm(jobd: Jobd) -> None:
    """Every verb the users run, run once as root: a user's child can import nothing."""
    for args in (
        ("whoami", "-o", "json"),
        ("whoami",),
        ("get", "-o", "json"),
        ("submit", "-p", "pa", "--cwd", "/tmp", "--", "true"),
        ("cancel", "999999"),
        ("apply", "-f", "/nonexistent.yaml"),
    ):
        _job(jobd, *args)
    _raw(jobd.extra["socket"], "GET", "/whoami", {})


def _as(jobd: Jobd, user: str, *args: str) -> tuple[int, str]:
    code, output = as_user(user, lambda: list(_job(jobd, *args)))
    return int(code), str(output)


def _ok(jobd: Jobd, user: str, *args: str) -> str:
    code, output = _as(jobd, user, *args)
    assert code == 0, f"job {' '.join(args)} as {user}: {output}"
    return output


def _submit(jobd: Jobd, user: str, project: str) -> int:
    return int(_ok(jobd, user, "submit", "-p", project, "--cwd", "/tmp", "--", "sleep", "60"))


def _raw(path: Path, method: str, target: str, headers: dict[str, str]) -> dict[str, Any]:
    """One request over the socket, with whatever headers a caller cares to send."""
    conn = http.client.HTTPConnection("localhost")
    sock = socket.socket(socket.AF_UNIX)
    sock.connect(str(path))
    conn.sock = sock
    conn.request(method, target, headers=headers)
    answer = conn.getresponse()
    body: dict[str, Any] = {"status": answer.status, **json.loads(answer.read())}
    conn.close()
    return body


def test_a_user_over_the_socket_needs_no_token_and_sees_only_their_projects(
    jobd: Jobd, users: dict[str, str]
) -> None:
    alice, bob = users["alice"], users["bob"]
    hers = _submit(jobd, alice, "pa")
    theirs = _submit(jobd, bob, "pb")
    shared = _submit(jobd, bob, "both")
    seen = json.loads(_ok(jobd, alice, "get", "-o", "json"))
    ids = {j["metadata"]["id"] for j in seen}
    assert hers in ids and shared in ids and theirs not in ids
    assert {j["metadata"]["project"] for j in seen} <= {"pa", "both", "grouped"}
    assert jobd.get(hers)["metadata"]["owner"] == alice
    code, said = _as(jobd, alice, "get", str(theirs))
    assert code != 0 and "not a member of project 'pb'" in said
    who = json.loads(_ok(jobd, alice, "whoami", "-o", "json"))
    uid = pwd.getpwnam(alice).pw_uid
    assert (who["user"], who["uid"], who["via"], who["admin"]) == (alice, uid, "socket", False)
    assert who["projects"] == ["both", "grouped", "pa"]  # `grouped` through @lab
    assert users["lab"] in who["groups"]


def test_a_users_cancel_of_anothers_job_is_refused_and_changes_nothing(
    jobd: Jobd, users: dict[str, str]
) -> None:
    alice, bob = users["alice"], users["bob"]
    theirs = _submit(jobd, bob, "both")
    before = jobd.get(theirs)
    code, said = _as(jobd, alice, "cancel", str(theirs))
    assert code != 0
    assert f"'{bob}''s" in said and "changes only their own jobs" in said
    after = jobd.get(theirs)
    assert after["status"]["phase"] == before["status"]["phase"] != "Cancelled"
    assert after["metadata"]["resource_version"] == before["metadata"]["resource_version"]
    assert not jobd.events(event="job_cancelled", job=theirs)
    # carol, an admin of `both`, may: she changes any of its jobs.
    _ok(jobd, users["carol"], "cancel", str(theirs))
    assert jobd.wait_phase(theirs, "Cancelled")["status"]["phase"] == "Cancelled"


def test_a_forged_owner_in_a_manifest_is_ignored(
    jobd: Jobd, users: dict[str, str], sock_dir: Path
) -> None:
    alice = users["alice"]
    manifest = sock_dir / "forged.yaml"
    manifest.write_text(
        "apiVersion: jobd/v1\nkind: Job\n"
        f"metadata: {{name: forged, project: pa, owner: {users['bob']}}}\n"
        "spec: {command: [sleep, '60'], cwd: /tmp}\n"
    )
    manifest.chmod(0o644)
    _ok(jobd, alice, "apply", "-f", str(manifest))
    forged = json.loads(jobd.ok("get", "pa/forged", "-o", "json"))
    assert forged["metadata"]["owner"] == alice


def test_headers_claiming_another_identity_are_ignored_on_the_socket(
    jobd: Jobd, users: dict[str, str]
) -> None:
    admin_token = (jobd.root / "data" / "admin.token").read_text().strip()
    claims = {"Authorization": f"Bearer {admin_token}", "X-Jobd-User": "root"}
    path = jobd.extra["socket"]
    who = as_user(users["alice"], lambda: _raw(path, "GET", "/whoami", claims))
    assert who["status"] == 200
    assert (who["user"], who["role"], who["via"]) == (users["alice"], "user", "socket")
    token_list = as_user(users["alice"], lambda: _raw(path, "GET", "/tokens", claims))
    assert token_list["status"] == 403  # the admin token it sent counted for nothing


def test_root_and_the_admin_group_are_admins_over_the_socket(
    jobd: Jobd, users: dict[str, str]
) -> None:
    code, output = _job(jobd, "whoami", "-o", "json")
    assert code == 0, output
    who = json.loads(output)
    assert (who["user"], who["uid"], who["admin"], who["projects"]) == ("root", 0, True, None)
    dana = json.loads(_ok(jobd, users["dana"], "whoami", "-o", "json"))
    assert (dana["user"], dana["admin"], dana["projects"]) == (users["dana"], True, None)
    theirs = _submit(jobd, users["bob"], "pb")
    _ok(jobd, users["dana"], "cancel", str(theirs))  # an admin changes any job
    assert jobd.wait_phase(theirs, "Cancelled")["status"]["phase"] == "Cancelled"
