"""On a worker's host, `job` talks to the agent's socket, which vouches for the caller.

A real `jobd broker` and a real `jobd worker --socket PATH` holding a worker token from
a 0600 file; real Unix users made for the test (root only: it skips elsewhere, fails
under CI=true), and the real `job` command in a child process that has become each.
The agent relays a user's request under its worker token with the user's name: alice is
alice there, with her projects, and owns what she submits. It vouches for nobody else:
root is refused at the relay, an admin (the broker's --admin-group) by the broker, a
worker's own route is not relayed, and a caller's headers claiming another identity or
carrying a token count for nothing.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

from jobd.cli.job_main import cli
from tests.e2e.harness import BIN, REPO, _free_port
from tests.people import as_user, local_users


@pytest.fixture(scope="module")
def users() -> Iterator[dict[str, str]]:
    with local_users("alice", "dana", groups={"admins": ("dana",)}) as names:
        yield names


class Cluster:
    def __init__(self, root: Path, sock_dir: Path, admins: str) -> None:
        self.root, self.port = root, _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.socket = sock_dir / "w1.sock"
        base = {k: v for k, v in os.environ.items() if not k.startswith(("JOBD_", "XDG_"))}
        self.env = base | {
            "JOBD_DATA_DIR": str(root / "data"),
            "JOBD_LOG_DIR": str(root / "logs"),
            "JOBD_URL": self.url,
            "PYTHONPATH": str(REPO),
        }
        self.processes: list[subprocess.Popen[bytes]] = []
        try:
            self._start_both(root, admins)
        except BaseException:
            self.close()  # nothing left running when it did not come up
            raise

    def _start_both(self, root: Path, admins: str) -> None:
        made = self._jobd("token", "create", "--role", "worker", "--worker", "w1")
        token_file = root / "w1.token"
        token_file.write_text(made)
        token_file.chmod(0o600)
        self._start("broker", "--port", str(self.port), "--socket", "none", "--admin-group", admins)
        self._wait(lambda: httpx.get(f"{self.url}/readyz").status_code == 200)
        self._start(
            "worker", "--name", "w1", "--gpus", "none", "--socket", str(self.socket),
            "--token-file", str(token_file), "--state-dir", str(root / "state"),
        )  # fmt: skip
        self._wait(lambda: self.admin_api().get("/workers/w1").is_success)

    def _jobd(self, *args: str) -> str:
        done = subprocess.run(
            [str(BIN / "jobd"), *args], env=self.env, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    def _start(self, *args: str) -> None:
        log = (self.root / f"{args[0]}.log").open("wb")
        env = self.env | {"JOBD_WORKER_CHECKPOINT_ROOT": str(self.root / "ckpt")}
        self.processes.append(
            subprocess.Popen(
                [str(BIN / "jobd"), *args], env=env, cwd=self.root, stdout=log, stderr=log
            )
        )

    def _wait(self, ready: Any) -> None:
        deadline = time.monotonic() + 60
        while True:
            try:
                if ready():
                    return
            except httpx.TransportError:
                pass
            logs = {p.name: p.read_text() for p in self.root.glob("*.log")}
            assert time.monotonic() < deadline, logs
            assert all(p.poll() is None for p in self.processes), logs
            time.sleep(0.05)

    def admin_api(self) -> httpx.Client:
        token = (self.root / "data" / "admin.token").read_text().strip()
        return httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {token}"})

    def close(self) -> None:
        for process in reversed(self.processes):
            process.terminate()
            process.wait(10)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, users: dict[str, str]) -> Iterator[Cluster]:
    sock_dir = Path(tempfile.mkdtemp(prefix="jobd-relay-"))
    sock_dir.chmod(0o755)
    running: Cluster | None = None
    try:
        running = Cluster(tmp_path_factory.mktemp("relay"), sock_dir, users["admins"])
        project = {
            "apiVersion": "jobd/v1",
            "kind": "Project",
            "metadata": {"name": "lab"},
            "spec": {"members": [users["alice"]]},
        }
        with running.admin_api() as api:
            assert api.post("/apply", json={"documents": [project]}).status_code == 200
        for args in (
            ("whoami", "-o", "json"),
            ("get", "-o", "json"),
            ("submit", "-p", "x", "--", "true"),
        ):
            _job(running, *args)  # every verb once as root: a user's child imports nothing
        _raw(running.socket, "GET", "/whoami", {})
        yield running
    finally:
        if running is not None:
            running.close()
        shutil.rmtree(sock_dir, ignore_errors=True)


def _job(cluster: Cluster, *args: str) -> tuple[int, str]:
    env = {
        "JOBD_SOCKET": str(cluster.socket),
        "JOBD_URL": "",
        "JOBD_TOKEN": "",
        "JOBD_CONFIG": "/nonexistent/jobd/config.yaml",
    }
    result = CliRunner().invoke(cli, list(args), env=env, prog_name="job")
    return result.exit_code, result.output


def _as(cluster: Cluster, user: str, *args: str) -> tuple[int, str]:
    code, output = as_user(user, lambda: list(_job(cluster, *args)))
    return int(code), str(output)


def _raw(path: Path, method: str, target: str, headers: dict[str, str]) -> dict[str, Any]:
    conn = http.client.HTTPConnection("localhost")
    sock = socket.socket(socket.AF_UNIX)
    sock.connect(str(path))
    conn.sock = sock
    conn.request(method, target, body=b"{}" if method == "POST" else None, headers=headers)
    answer = conn.getresponse()
    body: dict[str, Any] = {"status": answer.status, **json.loads(answer.read())}
    conn.close()
    return body


def test_a_user_on_a_worker_host_is_themselves_through_its_socket(
    cluster: Cluster, users: dict[str, str]
) -> None:
    alice = users["alice"]
    code, said = _as(cluster, alice, "whoami", "-o", "json")
    assert code == 0, said
    who = json.loads(said)
    assert (who["user"], who["via"], who["admin"], who["projects"]) == (
        alice,
        "vouched",
        False,
        ["lab"],
    )
    code, said = _as(cluster, alice, "submit", "-p", "lab", "--cwd", "/tmp", "--", "true")
    assert code == 0, said
    with cluster.admin_api() as api:
        assert api.get(f"/jobs/{int(said)}").json()["metadata"]["owner"] == alice
    code, said = _as(cluster, alice, "submit", "-p", "other", "--cwd", "/tmp", "--", "true")
    assert code != 0 and "not a member of project 'other'" in said


def test_root_and_admins_are_not_vouched_for(cluster: Cluster, users: dict[str, str]) -> None:
    code, said = _job(cluster, "whoami")  # this process: root on the worker's host
    assert code != 0 and "root on a worker's host is not vouched for" in said
    code, said = _as(cluster, users["dana"], "whoami")
    assert code != 0 and f"may not vouch for {users['dana']!r}, an admin" in said


def test_the_worker_token_serves_no_caller_as_the_worker(
    cluster: Cluster, users: dict[str, str]
) -> None:
    path, alice = cluster.socket, users["alice"]
    beat = as_user(alice, lambda: _raw(path, "POST", "/workers/w1/heartbeat", {}))
    assert beat["status"] == 403 and "not relayed" in beat["detail"]
    with cluster.admin_api() as api:
        admin = api.headers["Authorization"]
    claims = {"Authorization": admin, "X-Jobd-User": "root"}
    who = as_user(alice, lambda: _raw(path, "GET", "/whoami", claims))
    assert (who["status"], who["user"], who["role"]) == (200, alice, "user")
    tokens = as_user(alice, lambda: _raw(path, "GET", "/tokens", claims))
    assert tokens["status"] == 403
