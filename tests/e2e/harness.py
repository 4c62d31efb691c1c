"""End-to-end harness: the real `jobd dev` in a subprocess and the real `job` command."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from jobd.worker.shim.client import adopt

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
POLL_S = 0.05  # a poll is one request in this process; the broker answers it in milliseconds


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Jobd:
    """A running `jobd dev` and a way to run `job` against it."""

    url: str
    root: Path
    env: dict[str, str]
    process: subprocess.Popen[bytes]
    extra: dict[str, Any] = field(default_factory=dict)

    def job(
        self, *args: str, input: str | None = None, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(BIN / "job"), *args],
            env=self.env,
            cwd=self.root,
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def ok(self, *args: str, input: str | None = None) -> str:
        result = self.job(*args, input=input)
        assert result.returncode == 0, f"job {' '.join(args)}: {result.stderr}"
        return result.stdout

    def get(self, job_id: int | str) -> dict[str, Any]:
        return json.loads(self.ok("get", str(job_id), "-o", "json"))  # type: ignore[no-any-return]

    def wait_phase(self, job_id: int | str, *phases: str, timeout: float = 30) -> dict[str, Any]:
        """The job's document (as `job get -o json` prints it) once it is in one of `phases`.

        A name is resolved by `job get` (again if its job goes); the polls read
        `GET /jobs/ID` in this process: a `job` process per poll costs more than the wait.
        """
        deadline = time.monotonic() + timeout
        known = str(job_id) if str(job_id).isdigit() else None
        with self.api() as api:
            while True:
                doc = _read_job(api, known) if known is not None else None
                if doc is None:
                    doc = self.get(job_id)
                    known = str(doc["metadata"]["id"])
                if doc["status"]["phase"] in phases:
                    return doc
                if time.monotonic() > deadline:
                    raise AssertionError(f"job {job_id} is {doc['status']['phase']}, not {phases}")
                time.sleep(POLL_S)

    def events(self, **filters: Any) -> list[dict[str, Any]]:
        lines = (self.root / "logs" / "events.jsonl").read_text().splitlines()
        found = [json.loads(line) for line in lines if line.strip()]
        return [e for e in found if all(e.get(k) == v for k, v in filters.items())]

    def api(self) -> httpx.Client:
        token = (self.root / "data" / "admin.token").read_text().strip()
        return httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {token}"})


def _read_job(api: httpx.Client, job_id: str) -> dict[str, Any] | None:
    """The job's document as the API answers it (and `job get -o json` prints it), or None
    when there is no such job."""
    found = api.get(f"/jobs/{job_id}")
    if found.status_code == 404:
        return None
    found.raise_for_status()
    return found.json()  # type: ignore[no-any-return]


def start_jobd(root: Path, *flags: str, env_extra: dict[str, str] | None = None) -> Jobd:
    """`jobd dev` on a free port, ready once its worker has registered.

    Tests run in parallel (pytest-xdist): a port free when picked may be another's by the
    time jobd binds it. jobd then exits saying so, before touching its store; another port
    is picked.
    """
    for _ in range(PORT_TRIES):
        jobd = _launch(root, _free_port(), flags, env_extra or {})
        if _ready(jobd):
            return jobd
    raise RuntimeError(f"jobd dev found no free port in {PORT_TRIES} tries")


PORT_TRIES = 5
READY_S = 60.0  # a deadline, not a wait: a loaded machine may take this long to start jobd


def _launch(root: Path, port: int, flags: tuple[str, ...], env_extra: dict[str, str]) -> Jobd:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JOBD_", "XDG_DATA_HOME"))}
    env.update(
        {
            "JOBD_URL": f"http://127.0.0.1:{port}",
            "JOBD_DATA_DIR": str(root / "data"),
            "JOBD_LOG_DIR": str(root / "logs"),
            "JOBD_WORKER_CHECKPOINT_ROOT": str(root / "ckpt"),
            "JOBD_WORKER_NAME": "w1",
            "JOBD_CONFIG": str(root / "no-config.yaml"),  # no user's contexts steer `job`
            "PYTHONPATH": str(REPO),
        }
    )
    env.update(env_extra)
    with (root / "dev.log").open("wb") as log:
        process = subprocess.Popen(
            [str(BIN / "jobd"), "dev", "--port", str(port), "--gpus", "none", *flags],
            env=env,
            cwd=root,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    return Jobd(f"http://127.0.0.1:{port}", root, env, process)


def _ready(jobd: Jobd) -> bool:
    """Wait until `jobd` serves and its worker has registered: True; False when it exited
    because its port was taken. Any other end is an error."""
    deadline = time.monotonic() + READY_S
    # One client for every poll: each httpx.get() builds an SSL context, 20 ms of CPU.
    with httpx.Client(base_url=jobd.url, timeout=0.5) as http:
        while time.monotonic() < deadline:
            if jobd.process.poll() is not None:
                log = (jobd.root / "dev.log").read_text()
                if "is taken" in log:
                    return False
                raise RuntimeError(f"jobd dev exited: {log}")
            try:
                if http.get("/readyz").status_code == 200 and _has_a_worker(jobd):
                    return True
            except httpx.TransportError:
                pass
            time.sleep(POLL_S)
    jobd.process.kill()
    raise RuntimeError(f"jobd dev did not become ready in {READY_S:.0f} s")


def _has_a_worker(jobd: Jobd) -> bool:
    with jobd.api() as api:
        return bool(api.get("/workers").json()["items"])


def stop_jobd(jobd: Jobd, end_jobs: bool = True) -> None:
    """Stop `jobd dev`, then (end_jobs) the jobs it leaves running: stopping jobd stops none."""
    jobd.process.terminate()
    try:
        jobd.process.wait(10)
    except subprocess.TimeoutExpired:
        jobd.process.kill()
        jobd.process.wait()
    if end_jobs:
        end_all_jobs(jobd.root)


def end_all_jobs(root: Path, timeout_s: float = 10.0) -> None:
    """SIGKILL every job still supervised under root's worker state, through its supervisor
    (a stop with no grace), so no test leaves a workload behind."""
    live = [
        job
        for state_dir in sorted((root / "data" / "worker").glob("*/jobs/*"))
        if (job := adopt(state_dir)) is not None and job.status() is None
    ]
    for job in live:
        job.request_stop(0.0, "test_teardown")
    deadline = time.monotonic() + timeout_s
    while any(job.status() is None for job in live):
        assert time.monotonic() < deadline, "a supervisor did not end its job at teardown"
        time.sleep(0.05)


def process_alive(pid: int) -> bool:
    """Is pid a live process (not gone, not a zombie waiting for its parent)?"""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in "ZX"


def write_script(root: Path, name: str, body: str) -> list[str]:
    """A workload script in `root`; returns the argv that runs it with this Python."""
    path = root / name
    path.write_text(body)
    return [sys.executable, str(path)]


def manifest(name: str, command: list[str], **spec: Any) -> str:
    """A one-job YAML manifest (JSON is YAML too)."""
    doc = {
        "apiVersion": "jobd/v1",
        "kind": "Job",
        "metadata": {"name": name, "project": spec.pop("project", "default")},
        "spec": {"command": command, **spec},
    }
    return json.dumps(doc)


class Lab:
    """A real `jobd broker` and real `jobd worker`s, each its own process on this host,
    with the API and the `job` command against them: the set-up of the end-to-end tests
    that need more than `jobd dev`'s one worker. Each test file adds its own workers
    (`start`) and helpers; `close` stops them all and ends what their jobs left."""

    def __init__(self, root: Path, env: dict[str, str] | None = None) -> None:
        self.root = root
        self.port = port = _free_port()
        self.url = f"http://127.0.0.1:{port}"
        base = {k: v for k, v in os.environ.items() if not k.startswith(("JOBD_", "XDG_"))}
        base |= env or {}  # a test's own settings for every process of the lab
        self.env = base | {
            "JOBD_DATA_DIR": str(root / "data"),
            "JOBD_LOG_DIR": str(root / "logs"),
            "JOBD_URL": self.url,
            "JOBD_CONFIG": str(root / "no-config.yaml"),  # no user's contexts steer `job`
            "JOBD_WORKER_CHECKPOINT_ROOT": str(root / "ckpt"),
            "PYTHONPATH": str(REPO),
        }
        self.processes: dict[str, subprocess.Popen[bytes]] = {}  # by log name
        self.start_broker()

    def start_broker(self, *flags: str, log: str = "broker") -> None:
        """`jobd broker` on the lab's port (with `flags`), once it answers ready."""
        self.start(log, "broker", "--port", str(self.port), *flags)
        self.wait_until(lambda: httpx.get(f"{self.url}/readyz", timeout=0.5).status_code == 200)

    def stop(self, log: str) -> None:
        """Stop one process (SIGTERM) and forget it: a broker stopped leaves its workers
        and their jobs running."""
        process = self.processes.pop(log)
        process.terminate()
        process.wait(10)

    def start(self, log: str, *args: str) -> None:
        """`jobd ARGS...`, its output in `<root>/<log>.log`."""
        out = (self.root / f"{log}.log").open("wb")
        self.processes[log] = subprocess.Popen(
            [str(BIN / "jobd"), *args], env=self.env, cwd=self.root, stdout=out, stderr=out
        )

    def start_worker(self, name: str, *flags: str) -> None:
        """`jobd worker --name NAME` with no GPUs, its state under the lab's data dir."""
        state = self.root / "data" / "worker" / name
        self.start(name, "worker", "--name", name, "--gpus", "none", "--state-dir", str(state),
                   *flags)  # fmt: skip

    def restart_broker(self, between: Any = None) -> None:
        """Stop the broker, run `between()` while it is down (its store is free to open),
        and start it again on the same port; the workers carry on and reconnect."""
        broker = self.processes.pop("broker")
        broker.terminate()
        broker.wait(10)
        if between is not None:
            between()
        self.start("broker-again", "broker", "--port", str(self.port))
        self.wait_until(lambda: httpx.get(f"{self.url}/readyz", timeout=0.5).status_code == 200)

    def wait_until(self, ready: Any, timeout: float = 30) -> None:
        """Until `ready()` holds; a process that ended meanwhile fails with its log."""
        deadline = time.monotonic() + timeout
        while True:
            for log, process in self.processes.items():
                assert process.poll() is None, (self.root / f"{log}.log").read_text()
            try:
                if ready():
                    return
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "the lab did not start"
            time.sleep(0.05)

    def wait_workers(self, count: int) -> None:
        self.wait_until(lambda: len(self.api("GET", "/workers")["items"]) == count)

    def api(self, method: str, path: str, body: Any = None) -> Any:
        """The broker's answer as the admin token asks, which must be a success."""
        token = (self.root / "data" / "admin.token").read_text().strip()
        headers = {"Authorization": f"Bearer {token}"}
        answer = httpx.request(method, f"{self.url}{path}", headers=headers, json=body, timeout=10)
        assert answer.status_code < 300, answer.text
        return answer.json()

    def job(self, *args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(BIN / "job"), *args], env=self.env, cwd=self.root, input=input,
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip

    def wait_phase(self, job_id: int, *phases: str, timeout: float = 60) -> dict[str, Any]:
        """The job's document once it is in one of `phases`."""
        deadline = time.monotonic() + timeout
        while (doc := self.api("GET", f"/jobs/{job_id}"))["status"]["phase"] not in phases:
            assert time.monotonic() < deadline, f"job {job_id}: {doc['status']}"
            time.sleep(POLL_S)
        found: dict[str, Any] = doc
        return found

    def close(self) -> None:
        for process in reversed(self.processes.values()):
            if process.poll() is None:
                process.terminate()
                process.wait(10)
        end_all_jobs(self.root)
