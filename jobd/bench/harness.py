"""Real brokers and workers for the benchmark: subprocesses on free ports in a temp dir.

Each scenario that needs a broker starts its own (`jobd broker`, or `jobd dev` for a
broker with one real worker) with `sys.executable -m jobd`, configured only through the
environment so nothing of the caller's jobd setup leaks in, and stops it when done. The
children die with the benchmark (PR_SET_PDEATHSIG on Linux), so a killed bench leaves no
broker behind. Everything binds and talks to 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import anyio
import httpx

from jobd.store import sqlite_url
from jobd.wire import routes
from jobd.wire.client import AsyncClient

# How many standby brokers to start beside each PostgreSQL broker (running_broker).
STANDBYS_ENV = "JOBD_BENCH_STANDBYS"

__all__ = [
    "REPO_ROOT",
    "STANDBYS_ENV",
    "BrokerError",
    "BrokerProcess",
    "Endpoint",
    "Mode",
    "client",
    "free_port",
    "leading_broker",
    "raise_open_file_limit",
    "running_broker",
    "wire_client",
]

# The directory holding the `jobd` package: children and workloads import jobd from here.
REPO_ROOT = Path(__file__).resolve().parent.parent.parent
_PR_SET_PDEATHSIG = 1
_START_TIMEOUT_S = 60.0
# broker: `jobd broker` alone; dev: `jobd dev` (one process); split: `jobd broker` and
# `jobd worker` as two processes, as they run on a real machine (one core each here).
Mode = Literal["broker", "dev", "split"]


@dataclass(frozen=True)
class Endpoint:
    """Where a broker answers and the token it accepts."""

    url: str
    token: str


def leading_broker(urls: list[str]) -> str:
    """Of a leader and its standbys (`--server a,b`, as clients take it: wire/failover.py),
    the one to measure: the broker whose `/readyz` says it leads, else the first ready,
    else the first. A bench measures one broker, and a standby only redirects writes."""
    if len(urls) == 1:
        return urls[0]
    ready = []
    for url in urls:
        said = _readiness(url)
        if said == "leader":
            return url
        if said is not None:
            ready.append(url)
    return (ready or urls)[0]


def _readiness(url: str) -> str | None:
    """`leader` or `standby` as the broker's `/readyz` says it; None: down or not ready."""
    try:
        answer = httpx.get(f"{url}{routes.READYZ.url()}", timeout=3.0, trust_env=False)
    except (httpx.HTTPError, ValueError):
        return None
    return answer.text.strip() if answer.status_code == 200 else None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def raise_open_file_limit() -> int:
    """Lift RLIMIT_NOFILE's soft limit to the hard one (children inherit it); the new soft."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


class BrokerError(Exception):
    """The broker answered with an error status; the message says which call and why."""


async def _raise_on_error(response: httpx.Response) -> None:
    if response.status_code < 400:
        return
    await response.aread()
    try:
        detail = response.json().get("detail", "")
    except ValueError:
        detail = response.text[:200]
    request = response.request
    raise BrokerError(f"{request.method} {request.url.path}: {response.status_code} {detail}")


def client(endpoint: Endpoint, connections: int = 64, timeout_s: float = 30.0) -> httpx.AsyncClient:
    """An HTTP client of the broker that raises BrokerError on 4xx/5xx; no proxies.

    httpcore scans its whole pool on every request, so a loop that wants to be one client
    of many gets a client of its own with a connection or two, not a share of a big pool.
    """
    return httpx.AsyncClient(
        event_hooks={"response": [_raise_on_error]},
        verify=endpoint.url.startswith("https:"),  # no CA bundle to load for plain http
        base_url=endpoint.url,
        headers={"Authorization": f"Bearer {endpoint.token}"},
        timeout=httpx.Timeout(timeout_s, read=timeout_s + 40),
        limits=httpx.Limits(max_connections=connections, max_keepalive_connections=connections),
        trust_env=False,
    )


def wire_client(endpoint: Endpoint, connections: int = 4, timeout_s: float = 30.0) -> AsyncClient:
    """The wire's client of the broker, the agent's own, for a simulated worker: its calls
    raise ApiError / BrokerUnreachable; no proxies (a transport of its own), a small pool."""
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
    return AsyncClient(
        endpoint.url,
        endpoint.token,
        timeout=timeout_s,
        transport=httpx.AsyncHTTPTransport(limits=limits),
        user_agent="jobd-bench",
    )


def _resolve_prctl() -> Any:
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


# Resolved here, not in the child: between fork and exec only async-signal-safe work.
_PRCTL = _resolve_prctl() if sys.platform == "linux" else None


def _die_with_parent() -> None:
    if _PRCTL is not None:
        _PRCTL(_PR_SET_PDEATHSIG, signal.SIGTERM)


def _child_env(overrides: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBD_")}
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p
    )
    # No Unix socket: the scenarios speak TCP, and root's default socket is one path
    # that two benches (or a bench beside a real broker) would contend for.
    env["JOBD_SOCKET"] = "none"
    env.update(overrides)
    return env


class BrokerProcess:
    """One `jobd broker` or `jobd dev` subprocess with its own data and log directories."""

    def __init__(
        self,
        root: Path,
        mode: Mode = "broker",
        slots: int = 8,
        db_url: str | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.root, self.mode, self.slots = root, mode, slots
        self.settings_env = env or {}  # more of the broker's settings, as JOBD_* variables
        self.port = free_port()
        self.endpoint = Endpoint(f"http://127.0.0.1:{self.port}", secrets.token_urlsafe(24))
        self.data_dir = root / "data"
        self.db_url = db_url or sqlite_url(self.data_dir)
        self.log_path = root / f"{mode}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.worker_proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        assert self.proc is not None, "not started"
        return self.proc.pid

    def _env(self) -> dict[str, str]:
        return _child_env(
            {
                "JOBD_TOKEN": self.endpoint.token,
                "JOBD_HOST": "127.0.0.1",
                "JOBD_PORT": str(self.port),
                "JOBD_DATA_DIR": str(self.data_dir),
                "JOBD_LOG_DIR": str(self.root / "logs"),
                "JOBD_DB": self.db_url,
                "JOBD_WORKER_NAME": "bench-worker",
                "JOBD_WORKER_SLOTS": str(self.slots),
                "JOBD_WORKER_GPUS": "none",
                "JOBD_WORKER_CHECKPOINT_ROOT": str(self.root / "checkpoints"),
                # `jobd worker` (split) would use the user's data dir: benches at once collide.
                "JOBD_WORKER_STATE_DIR": str(self.root / "worker-state"),
                "JOBD_WORKER_DEFAULT_GRACE_S": "30",
            }
            | self.settings_env
        )

    def spawn(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        program = "broker" if self.mode == "split" else self.mode
        self.proc = self._popen(program, self._env(), self.log_path)
        if self.mode == "split":
            env = self._env() | {"JOBD_URL": self.endpoint.url}
            self.worker_proc = self._popen("worker", env, self.root / "worker.log")

    def _popen(self, program: str, env: dict[str, str], log_path: Path) -> subprocess.Popen[bytes]:
        with log_path.open("wb") as log:
            return subprocess.Popen(
                [sys.executable, "-m", "jobd", program],
                env=env,
                cwd=self.root,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=_die_with_parent if _PRCTL is not None else None,
            )

    async def wait_ready(self, http: httpx.AsyncClient) -> None:
        """Until /healthz answers (and, for `dev`, the worker has registered)."""
        deadline = time.monotonic() + _START_TIMEOUT_S
        while time.monotonic() < deadline:
            self._check_alive()
            if await self._ready(http):
                return
            await anyio.sleep(0.05)
        raise RuntimeError(f"jobd {self.mode} did not come up in {_START_TIMEOUT_S:.0f} s")

    async def _ready(self, http: httpx.AsyncClient) -> bool:
        try:
            if (await http.get(routes.HEALTHZ.url())).status_code != 200:
                return False
            if self.mode == "broker":
                return True
            workers = (await http.get(routes.LIST_WORKERS.url())).json()["items"]
            return any(w["status"]["phase"] == "Ready" for w in workers)
        except httpx.TransportError:
            return False

    def _check_alive(self) -> None:
        assert self.proc is not None
        if self.proc.poll() is not None:
            tail = self.log_path.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"jobd {self.mode} exited with {self.proc.returncode}: {tail}")

    def cpu_seconds(self) -> dict[str, float]:
        """CPU (user + system) each of our processes has used so far; Linux only."""
        used = {}
        for role, proc in (("broker", self.proc), ("worker", self.worker_proc)):
            if proc is not None and (seconds := _process_cpu_s(proc.pid)) is not None:
                used[role] = seconds
        if self.worker_proc is not None and "worker" in used:
            # The launcher, the supervisors and (reaped by them) the workloads. A process
            # gone unreaped (a supervisor the kernel reaped) takes its share with it.
            used["supervisors"] = _descendants_cpu_s(self.worker_proc.pid)
        return used

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 10.0) -> None:
        """Signal the processes (worker first); SIGKILL what has not exited in timeout_s."""
        for proc in (self.worker_proc, self.proc):
            if proc is None or proc.poll() is not None:
                continue
            proc.send_signal(sig)
            try:
                proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout_s)


@contextlib.asynccontextmanager
async def running_broker(
    root: Path,
    mode: Mode = "broker",
    slots: int = 8,
    db_url: str | None = None,
    env: dict[str, str] | None = None,
    **kw: Any,
) -> AsyncIterator[tuple[BrokerProcess, httpx.AsyncClient]]:
    """A started broker and a client of it; both closed on the way out.

    On PostgreSQL, `JOBD_BENCH_STANDBYS=N` starts N more brokers on the same store once
    this one leads: standbys (broker/leadership.py), so a figure shows what their
    presence costs the leader.
    """
    broker = BrokerProcess(root, mode, slots, db_url, env)
    broker.spawn()
    standbys: list[BrokerProcess] = []
    try:
        async with client(broker.endpoint, **kw) as http:
            await broker.wait_ready(http)
            standbys = await _standbys(root, db_url, env)
            yield broker, http
    finally:
        for standby in standbys:
            standby.stop()
        broker.stop()


async def _standbys(
    root: Path, db_url: str | None, env: dict[str, str] | None
) -> list[BrokerProcess]:
    count = int(os.environ.get(STANDBYS_ENV) or 0)
    if not count or db_url is None or db_url.startswith("sqlite"):
        return []
    started = []
    for n in range(count):
        standby = BrokerProcess(root / f"standby-{n}", "broker", db_url=db_url, env=env)
        standby.spawn()
        started.append(standby)
        async with client(standby.endpoint) as http:
            await standby.wait_ready(http)
    return started


def _descendants_cpu_s(root: int) -> float:
    """CPU of every live descendant of root, with what each has reaped, in seconds."""
    parents, cpu = {}, {}
    for entry in (e for e in Path("/proc").iterdir() if e.name.isdigit()):
        try:
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
        except (OSError, ValueError):
            continue
        parents[int(entry.name)] = int(fields[1])
        cpu[int(entry.name)] = sum(int(f) for f in fields[11:15])
    below, frontier = set(), [root]
    while frontier:
        parent = frontier.pop()
        kids = [pid for pid, ppid in parents.items() if ppid == parent]
        below.update(kids)
        frontier.extend(kids)
    return sum(cpu[pid] for pid in below) / os.sysconf("SC_CLK_TCK")


def _process_cpu_s(pid: int) -> float | None:
    """utime + stime of a process from /proc, in seconds; None where there is no /proc."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return None
    # After the command name: state is field 3, utime and stime are fields 14 and 15.
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
