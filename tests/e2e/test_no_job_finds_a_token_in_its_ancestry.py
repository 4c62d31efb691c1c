"""No job acts as jobd: a workload reads its own environment and every ancestor's
`/proc/PID/environ` it can, and finds no token there. Real processes throughout.

Under `jobd dev` (admin token in `<data-dir>/admin.token`, as it starts by default); and a
real `jobd broker` with a real `jobd worker` that holds a worker token from a 0600 file,
made by `jobd token create` against the store before the broker ever ran (a fresh
machine's first token). The same job under a worker given the token in its environment
finds it in its parent's: the kernel shows a process's initial environment, whatever it
unsets later, which is why workers take a file. Along the way: that worker token is all
a worker needs, a user token gets 403 naming the project through the real `job` CLI,
and a token revoked against the store is refused by the running broker within a second.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.harness import BIN, REPO, _free_port, start_jobd, stop_jobd

ANCESTRY = r"""
import json, os, sys
found, pid = {}, os.getpid()
while pid > 1:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            found[pid] = f.read().decode(errors="replace")
        with open(f"/proc/{pid}/status") as f:
            pid = int(next(l for l in f if l.startswith("PPid:")).split()[1])
    except OSError:
        break
with open(sys.argv[1], "w") as out:
    json.dump(found, out)
"""


def _submit(env: dict[str, str], root: Path, name: str, project: str = "default") -> int:
    script = root / "ancestry.py"
    script.write_text(ANCESTRY)
    out = root / f"{name}.json"
    result = subprocess.run(
        [str(BIN / "job"), "submit", "-p", project, "--name", name, "--wait", "--",
         sys.executable, str(script), str(out)],
        env=env, cwd=root, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return int(result.stdout.split()[0])


def _ancestry(root: Path, name: str) -> dict[int, str]:
    return {int(pid): env for pid, env in json.loads((root / f"{name}.json").read_text()).items()}


def test_a_job_under_jobd_dev_finds_no_token_in_its_ancestry(tmp_path: Path) -> None:
    jobd = start_jobd(tmp_path)
    try:
        _submit(jobd.env, tmp_path, "dev-job")
    finally:
        stop_jobd(jobd)
    admin = (tmp_path / "data" / "admin.token").read_text().strip()
    found = _ancestry(tmp_path, "dev-job")
    assert jobd.process.pid in found  # the agent's own environment was read
    assert all(admin not in env and "JOBD_TOKEN" not in env for env in found.values())


def _jobd(env: dict[str, str], *args: str, **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "jobd"), *args], env=env, capture_output=True, text=True, timeout=30, **kw
    )


def _wait_ready(url: str, process: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        assert process.poll() is None, f"{what} exited"
        try:
            if httpx.get(f"{url}/readyz", timeout=0.5).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    raise AssertionError(f"{what} not ready in 20 s")


class Cluster:
    """A real broker, and real workers started against it on demand."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        base = {k: v for k, v in os.environ.items() if not k.startswith(("JOBD_", "XDG_"))}
        self.env = base | {
            "JOBD_DATA_DIR": str(root / "data"),
            "JOBD_LOG_DIR": str(root / "logs"),
            "JOBD_URL": self.url,
            "PYTHONPATH": str(REPO),
        }
        self.processes: list[subprocess.Popen[bytes]] = []

    def token(self, *args: str) -> str:
        made = _jobd(self.env, "token", "create", *args)
        assert made.returncode == 0, made.stderr
        return made.stdout.strip()

    def start(self, name: str, *args: str, env: dict[str, str] | None = None) -> int:
        log = (self.root / f"{name}.log").open("wb")
        process = subprocess.Popen(
            [str(BIN / "jobd"), *args], env=env or self.env, cwd=self.root, stdout=log, stderr=log
        )
        self.processes.append(process)
        return process.pid

    def worker(self, name: str, env_extra: dict[str, str]) -> int:
        env = self.env | {"JOBD_WORKER_CHECKPOINT_ROOT": str(self.root / "ckpt")} | env_extra
        pid = self.start(name, "worker", "--name", name, "--gpus", "none", env=env)
        admin = {"Authorization": f"Bearer {self.admin()}"}
        deadline = time.monotonic() + 20
        while not httpx.get(f"{self.url}/workers/{name}", headers=admin).is_success:
            assert time.monotonic() < deadline, (self.root / f"{name}.log").read_text()
            time.sleep(0.05)
        return pid

    def stop(self, pid: int) -> None:
        for process in self.processes:
            if process.pid == pid:
                process.terminate()
                process.wait(10)

    def admin(self) -> str:
        return (self.root / "data" / "admin.token").read_text().strip()

    def close(self) -> None:
        for process in reversed(self.processes):
            if process.poll() is None:
                process.terminate()
                process.wait(10)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    running = Cluster(tmp_path)
    yield running
    running.close()


def test_a_worker_with_a_token_file_hands_no_token_down(cluster: Cluster) -> None:
    root = cluster.root
    w1 = cluster.token("--role", "worker", "--worker", "w1", "--name", "w1")  # no broker yet
    cluster.start("broker", "broker", "--port", str(cluster.port))
    _wait_ready(cluster.url, cluster.processes[0], "jobd broker")
    token_file = root / "w1.token"
    token_file.write_text(w1 + "\n")
    token_file.chmod(0o600)
    pid = cluster.worker("w1", {"JOBD_TOKEN_FILE": str(token_file)})

    job_id = _submit(cluster.env | {"JOBD_TOKEN": cluster.admin()}, root, "file-job")
    found = _ancestry(root, "file-job")
    assert pid in found  # the agent's environment was read, and holds neither token
    assert all(w1 not in env and cluster.admin() not in env for env in found.values())
    admin = {"Authorization": f"Bearer {cluster.admin()}"}
    done = httpx.get(f"{cluster.url}/jobs/{job_id}", headers=admin).json()["status"]
    assert done["phase"] == "Succeeded" and done["worker"] == "w1"  # the worker token sufficed

    # The control: a worker given its token in the environment shows it to its jobs.
    cluster.stop(pid)
    w2 = cluster.token("--role", "worker", "--worker", "w2", "--name", "w2")
    time.sleep(1.2)  # made against the store: the broker reads it within a second
    pid = cluster.worker("w2", {"JOBD_TOKEN": w2})
    _submit(cluster.env | {"JOBD_TOKEN": cluster.admin()}, root, "env-job")
    assert w2 in _ancestry(root, "env-job")[pid]


def test_user_tokens_and_revocation_against_a_real_broker(cluster: Cluster) -> None:
    cluster.start("broker", "broker", "--port", str(cluster.port))
    _wait_ready(cluster.url, cluster.processes[0], "jobd broker")
    alice = cluster.token("--role", "user", "--project", "a", "--name", "alice")
    time.sleep(1.2)
    as_alice = cluster.env | {"JOBD_TOKEN": alice}
    job = [str(BIN / "job")]
    ok = subprocess.run(
        [*job, "submit", "-p", "a", "--", "true"], env=as_alice, capture_output=True, text=True
    )
    assert ok.returncode == 0, ok.stderr
    refused = subprocess.run(
        [*job, "submit", "-p", "b", "--", "true"], env=as_alice, capture_output=True, text=True
    )
    assert refused.returncode != 0 and "'b'" in refused.stderr and "alice" in refused.stderr
    listed = _jobd(cluster.env, "token", "list", "-o", "json")
    assert [t["label"] for t in json.loads(listed.stdout)] == ["alice"]
    assert alice not in listed.stdout

    revoked = _jobd(cluster.env, "token", "revoke", "alice")
    assert revoked.returncode == 0, revoked.stderr
    gone_at = time.monotonic()
    headers = {"Authorization": f"Bearer {alice}"}
    while httpx.get(f"{cluster.url}/jobs", headers=headers).status_code != 401:
        assert time.monotonic() - gone_at < 2.5, "a revoked token still answered"
        time.sleep(0.05)
    log = (cluster.root / "broker.log").read_text()
    assert alice not in log and cluster.admin() not in log
