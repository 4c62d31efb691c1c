"""The agent's side of the per-job supervisor: launch one, find it again, stop it, read its end.

The supervisor (jobd.worker.supervisor) holds a job's output files and exit status and
outlives the agent; this module is all an agent needs to work with it through the job's
state directory. Its user is jobd.worker.execution (one Execution per job attempt).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
import subprocess
import sys
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import anyio.to_thread

import jobd
from jobd.filemodes import started_umask
from jobd.worker.runner.base import ProcessIdentity
from jobd.worker.supervisor import (
    LOCK_FILE,
    LOG_FILE,
    RECORD_FILE,
    SPEC_FILE,
    STATUS_FILE,
    STDERR_FILE,
    STDOUT_FILE,
    STOP_FILE,
    STOPPING_FILE,
    lock_is_held,
    read_json,
    utc_now,
    write_json_atomic,
)

__all__ = [
    "ExitRecord",
    "Launcher",
    "StopRecord",
    "SupervisedJob",
    "SupervisedSpec",
    "SupervisorRecord",
    "adopt",
    "kill_orphaned_workload",
    "launch",
    "scan",
]

# How often wait() looks when the kernel cannot say (no pidfd), and started() in any case.
POLL_INTERVAL_S = 0.02
_SUPERVISOR_MODULE = "jobd.worker.supervisor"
_POOL_MODULE = "jobd.worker.supervisor_pool"
# How long a wait for a job's end goes without looking at its state directory: a
# supervisor that died (kill -9) says nothing, and its released lock tells.
END_CHECK_S = 0.5
# A waiter whose end is forgotten (the oldest, past this many) looks within END_CHECK_S.
_ENDS_KEPT = 4096
# The directory holding the jobd package, so the supervisor imports the agent's own jobd.
_JOBD_HOME = str(Path(jobd.__file__).resolve().parent.parent)


@dataclass(frozen=True)
class SupervisedSpec:
    """What the supervisor runs; argv is never passed through a shell."""

    argv: list[str]
    cwd: str
    env: dict[str, str]  # the complete environment of the workload
    grace_s: float  # of a stop that names none (a SIGTERM to the supervisor, say)
    job_id: int
    attempt: int


@dataclass(frozen=True)
class StopRecord:
    """A stop the supervisor carried out: when SIGTERM went, when SIGKILL was due and went."""

    reason: str
    grace_s: float
    requested_at: str
    sigterm_at: str
    kill_at: str
    sigkill_at: str | None

    @classmethod
    def from_json(cls, data: object) -> StopRecord | None:
        if not isinstance(data, dict):
            return None
        try:
            return cls(**{name: data[name] for name in cls.__dataclass_fields__})
        except KeyError:
            return None


@dataclass(frozen=True)
class ExitRecord:
    """How a supervised job ended, as its status.json says (or that nobody can say)."""

    exit_code: int | None  # None when killed by a signal, or unknown
    signal: int | None
    signal_name: str | None
    started_at: str | None
    finished_at: str | None
    workload_pid: int | None
    stop: StopRecord | None
    error: str | None  # why the workload never ran, or why its end is unknown
    lost: bool = False  # the supervisor ended without recording the job's end

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ExitRecord:
        return cls(
            exit_code=_int(data.get("exit_code")),
            signal=_int(data.get("signal")),
            signal_name=_str(data.get("signal_name")),
            started_at=_str(data.get("started_at")),
            finished_at=_str(data.get("finished_at")),
            workload_pid=_int(data.get("workload_pid")),
            stop=StopRecord.from_json(data.get("stop")),
            error=_str(data.get("error")),
        )

    @classmethod
    def unrecorded(cls) -> ExitRecord:
        error = "the supervisor ended without recording the job's end"
        return cls(None, None, None, None, None, None, None, error, lost=True)


@dataclass(frozen=True)
class SupervisorRecord:
    """supervisor.json: who supervises the job and which process the workload is."""

    supervisor: ProcessIdentity
    workload: ProcessIdentity | None  # None until the workload has started
    job_id: int | None
    attempt: int | None

    @classmethod
    def read(cls, state_dir: Path) -> SupervisorRecord | None:
        data = read_json(state_dir / RECORD_FILE) or {}
        supervisor = _identity(data.get("supervisor_pid"), data.get("supervisor_start_time"))
        if supervisor is None:
            return None
        workload = _identity(data.get("workload_pid"), data.get("workload_start_time"))
        return cls(supervisor, workload, _int(data.get("job_id")), _int(data.get("attempt")))


class SupervisedJob:
    """One job's supervisor, launched by this agent or adopted from an earlier one."""

    def __init__(
        self,
        state_dir: Path,
        supervisor: ProcessIdentity | None = None,
        child: subprocess.Popen[bytes] | None = None,
        ended: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.state_dir = state_dir
        self._supervisor = supervisor
        self._child = child  # set when this agent launched it: it must reap it too
        # Returns once the launcher says the job is over (or after a while anyway).
        self._ended = ended

    @property
    def supervisor(self) -> ProcessIdentity | None:
        """The supervisor as launched or adopted (None: known by its files only)."""
        return self._supervisor

    @property
    def stdout_path(self) -> Path:
        return self.state_dir / STDOUT_FILE

    @property
    def stderr_path(self) -> Path:
        return self.state_dir / STDERR_FILE

    def record(self) -> SupervisorRecord | None:
        return SupervisorRecord.read(self.state_dir)

    def is_alive(self) -> bool:
        if self._child is not None:
            # Our child: alive until reaped (poll() reaps), even before it takes its lock.
            return self._child.poll() is None
        return lock_is_held(self.state_dir)

    def status(self) -> ExitRecord | None:
        """None while the supervisor runs, else how the job ended."""
        finished = _read_status(self.state_dir)
        if finished is not None or self.is_alive():
            return finished
        # status.json is written before the supervisor exits: look again, it may be new.
        return _read_status(self.state_dir) or ExitRecord.unrecorded()

    def stopping(self) -> StopRecord | None:
        """The stop under way (its deadline is the supervisor's), if one is."""
        return StopRecord.from_json(read_json(self.state_dir / STOPPING_FILE))

    def request_stop(self, grace_s: float | None, reason: str) -> None:
        """Ask for SIGTERM, then SIGKILL after grace_s (None: the spec's grace).

        The request is a file, so it holds even if this agent dies now; the signal only
        makes the supervisor look at once. A second request can bring SIGKILL closer,
        never push it back.
        """
        request = {"reason": reason, "grace_s": grace_s, "requested_at": utc_now()}
        write_json_atomic(self.state_dir / STOP_FILE, request)
        self._signal_supervisor(signal.SIGUSR1)

    async def started(self, timeout_s: float = 10.0) -> SupervisorRecord:
        """The record once the workload has started (or has failed to: see status())."""
        with anyio.fail_after(timeout_s):
            while True:
                record = self.record()
                ended = self.status() is not None
                if record is not None and (record.workload is not None or ended):
                    return record
                if ended:
                    raise RuntimeError(f"supervisor of {self.state_dir} ended without a record")
                await anyio.sleep(POLL_INTERVAL_S)

    async def wait(self) -> ExitRecord:
        """How the job ended, once its status.json is written (or its supervisor lost).

        A supervisor may live on to serve another job: its word (from the launcher), or
        else its exit, only says when to look again at the state directory.
        """
        while (finished := self.status()) is None:
            if self._ended is not None:
                await self._ended()
            else:
                await self._supervisor_exited()
        return finished

    async def _supervisor_exited(self) -> None:
        """Return soon after the supervisor exits (from a pidfd, else by polling), or after
        END_CHECK_S: an adopted supervisor may be a pooled one, ending the job and not
        itself."""
        pidfd = _pidfd_of(self._identity())
        if pidfd is None:
            await anyio.sleep(POLL_INTERVAL_S)
            return
        try:
            with anyio.move_on_after(END_CHECK_S):
                await anyio.wait_readable(pidfd)
        finally:
            os.close(pidfd)
        if self._child is not None:
            self._child.poll()  # reap it if it has exited

    def _identity(self) -> ProcessIdentity | None:
        if self._child is not None:
            # Our unreaped child: its pid cannot have been reused.
            return ProcessIdentity.of(self._child.pid)
        if self._supervisor is None:
            record = self.record()
            self._supervisor = None if record is None else record.supervisor
        return self._supervisor

    def _signal_supervisor(self, sig: int) -> bool:
        # Only a supervisor known to have its handlers in place (before that, SIGUSR1's
        # default action would kill it): one that answered its launch, holds its lock, or
        # wrote its record. The stop file alone reaches it within its poll interval.
        identity = self._supervisor
        if identity is None:
            record = self.record()
            identity = None if record is None else record.supervisor
        if identity is None and self._child is not None and lock_is_held(self.state_dir):
            identity = ProcessIdentity.of(self._child.pid)  # our unreaped child: no reuse
        pidfd = _pidfd_of(identity)
        if pidfd is None:
            return False
        try:
            signal.pidfd_send_signal(pidfd, sig)
        except ProcessLookupError:
            return False
        finally:
            os.close(pidfd)
        return True


def prepare(state_dir: Path, spec: SupervisedSpec) -> Path:
    """Write spec into a fresh state directory; its resolved path.

    Raises FileExistsError if state_dir already holds a launch (one directory per attempt).
    """
    state_dir = state_dir.resolve()
    state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    if (state_dir / SPEC_FILE).exists():
        raise FileExistsError(f"{state_dir} already holds a launch")
    # Read by this boot's supervisor only: no fsync on the way to a launch.
    write_json_atomic(state_dir / SPEC_FILE, asdict(spec), durable=False)
    return state_dir


def launch(state_dir: Path, spec: SupervisedSpec, prefix: list[str] | None = None) -> SupervisedJob:
    """Start a supervisor for spec in a fresh state directory, in a session of its own.

    `prefix` wraps the supervisor's command (`systemd-run --user --scope ...`, so the scope
    holds the supervisor and the whole job). Raises FileExistsError as prepare() does.
    """
    state_dir = prepare(state_dir, spec)
    log = os.open(
        state_dir.parent / LOG_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600
    )
    try:
        child = subprocess.Popen(
            [*(prefix or []), sys.executable, "-m", _SUPERVISOR_MODULE, str(state_dir)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=log,
            cwd="/",
            env=_supervisor_env(),
            start_new_session=True,  # a signal to the agent's group, or its death, stops here
            umask=started_umask(),  # the workload's, not the daemon's (jobd/filemodes.py)
        )
    finally:
        os.close(log)
    return SupervisedJob(state_dir, child=child)


class Launcher:
    """Supervisors from one small launcher process (jobd.worker.supervisor_pool).

    It hands each launch to an idle supervisor of its pool, else forks one (~1 ms where
    starting an interpreter per job costs ~30 ms of CPU). Launches are pipelined: each
    request carries an id, and each supervisor answers for itself, tagged with the id, once
    its workload runs, and again (`ID end`) once the job is over: a pooled supervisor lives
    on after its job, so its exit cannot mark the end. The launcher dies with the agent (it
    reads the agent's pipe to EOF); the supervisors, each in a session of its own, go on.
    """

    def __init__(self) -> None:
        self._process: anyio.abc.Process | None = None
        self._send_lock = anyio.Lock()
        self._start_lock = anyio.Lock()
        self._read_lock = anyio.Lock()
        self._next_id = 0
        self._replies = b""
        self._answers: dict[int, tuple[int, int]] = {}  # request id -> (pid, start time)
        self._ended: set[int] = set()  # request ids whose job is over
        self._news = anyio.Event()  # set (and replaced) after each read of answers

    async def launch(self, state_dir: Path, spec: SupervisedSpec) -> SupervisedJob:
        """A supervisor for spec in state_dir, returned once the workload runs or the
        supervisor is over (its status says which).

        Raises FileExistsError if state_dir holds a launch whose supervisor is gone.
        """
        state_dir = state_dir.absolute()
        self._next_id += 1
        request_id = self._next_id
        # vars(), not asdict(): asdict deep-copies the environment, ~1 ms a job.
        request = {"id": request_id, "state_dir": str(state_dir), "spec": vars(spec)}
        process, (pid, start_time) = await self._ask(
            request_id, json.dumps(request).encode() + b"\n"
        )
        if pid == 0:  # launched before (by an agent that died since): never a second copy
            adopted = adopt(state_dir)
            if adopted is None:
                raise FileExistsError(f"{state_dir} holds a launch whose supervisor is gone")
            return adopted
        ended = functools.partial(self._wait_end, process, request_id)
        return SupervisedJob(state_dir, supervisor=ProcessIdentity(pid, start_time), ended=ended)

    async def _ask(
        self, request_id: int, request: bytes
    ) -> tuple[anyio.abc.Process, tuple[int, int]]:
        try:
            process = await self._started()
            assert process.stdin is not None
            async with self._send_lock:
                await process.stdin.send(request)
            await self._read_until(process, lambda: request_id in self._answers)
        except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
            self._lost(process)
            raise RuntimeError("the supervisor launcher died") from exc
        return process, self._answers.pop(request_id)

    async def _wait_end(self, process: anyio.abc.Process, request_id: int) -> None:
        """Return once the job of request_id is said to be over, or after END_CHECK_S
        anyway (the caller looks at the state directory, which has the last word)."""
        with anyio.move_on_after(END_CHECK_S):
            if self._process is not process:  # that launcher is gone: no word will come
                await anyio.sleep(END_CHECK_S)
                return
            try:
                await self._read_until(process, lambda: request_id in self._ended)
            except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
                self._lost(process)
                await anyio.sleep(END_CHECK_S)
        self._ended.discard(request_id)

    async def _read_until(self, process: anyio.abc.Process, done: Callable[[], bool]) -> None:
        """Read answers until done() says ours is in: one task reads at a time and hands
        out every answer; the others wait for news (never behind a read that may find no
        more data, as their answer may be in already)."""
        while not done():
            if self._read_lock.locked():
                await self._news.wait()
                continue
            async with self._read_lock:
                try:
                    if not done():
                        await self._read_answers(process)
                finally:
                    self._news.set()
                    self._news = anyio.Event()

    async def _read_answers(self, process: anyio.abc.Process) -> None:
        assert process.stdout is not None
        self._replies += await process.stdout.receive()
        *lines, self._replies = self._replies.split(b"\n")
        for line in lines:
            request_id, *answer = line.split()
            if answer == [b"end"]:
                self._remember_end(int(request_id))
            else:
                pid, start_time = (int(field) for field in answer)
                self._answers[int(request_id)] = (pid, start_time)

    def _remember_end(self, request_id: int) -> None:
        self._ended.add(request_id)
        if len(self._ended) > _ENDS_KEPT:  # ends nobody waited for (seen in status.json first)
            self._ended = set(sorted(self._ended)[-_ENDS_KEPT // 2 :])

    def _lost(self, process: anyio.abc.Process) -> None:
        if self._process is process:
            self._process = None

    async def _started(self) -> anyio.abc.Process:
        async with self._start_lock:  # launches at once must not start a launcher each
            if self._process is None or self._process.returncode is not None:
                self._process = await self._start()
            return self._process

    async def _start(self) -> anyio.abc.Process:
        self._replies = b""
        return await anyio.open_process(
            [sys.executable, "-m", _POOL_MODULE],
            stderr=None,
            cwd="/",
            env=_supervisor_env(),
            start_new_session=True,  # Ctrl-C to the agent's terminal stops nothing here
            umask=started_umask(),  # the workload's, not the daemon's (jobd/filemodes.py)
        )

    async def aclose(self) -> None:
        """Close the launcher's pipe: it exits; the supervisors it forked run on."""
        if self._process is not None:
            with anyio.CancelScope(shield=True):
                await self._process.aclose()
            self._process = None


def adopt(state_dir: Path) -> SupervisedJob | None:
    """The job in state_dir if its supervisor is alive and the one recorded, or has finished.

    None when nothing was launched there, when the recorded process is not the supervisor
    (a reused pid), or when the supervisor died without recording the job's end.
    """
    state_dir = state_dir.resolve()
    if (state_dir / STATUS_FILE).exists():
        return SupervisedJob(state_dir)
    if lock_is_held(state_dir):
        record = SupervisorRecord.read(state_dir)
        identity = _find_supervisor(state_dir) if record is None else record.supervisor
        if identity is not None and identity.is_running():
            return SupervisedJob(state_dir, supervisor=identity)
    # It may have finished while we looked.
    return SupervisedJob(state_dir) if (state_dir / STATUS_FILE).exists() else None


def kill_orphaned_workload(state_dir: Path) -> bool:
    """SIGKILL the job whose supervisor died without recording its end; True if one ran.

    What the supervisor would have done at the end, left to the agent once adopt() says
    None. Its exit is lost with the supervisor. Only while the workload itself runs can its
    group be told from a stranger's, so members that outlive it are beyond reach here.
    """
    state_dir = state_dir.resolve()
    if (state_dir / STATUS_FILE).exists() or lock_is_held(state_dir):
        return False
    record = SupervisorRecord.read(state_dir)
    workload = None if record is None else record.workload
    if workload is None or not workload.is_running():
        return False
    try:
        os.killpg(workload.pid, signal.SIGKILL)  # it leads its group: pgid == pid
    except (ProcessLookupError, PermissionError):
        return False
    return True


def scan(root: Path) -> list[SupervisedJob]:
    """Every state directory under root whose supervisor is alive or has finished."""
    if not root.is_dir():
        return []
    found = (adopt(entry) for entry in sorted(root.iterdir()) if entry.is_dir())
    return [job for job in found if job is not None]


def _find_supervisor(state_dir: Path) -> ProcessIdentity | None:
    """The supervisor of state_dir, for when its record is lost: by the lock it holds, else
    by its command line."""
    return _lock_holder(state_dir) or _find_by_command_line(state_dir)


def _lock_holder(state_dir: Path) -> ProcessIdentity | None:
    """The process holding the directory's flock (or an older supervisor's lock file's),
    as /proc/locks names it (by inode)."""
    inodes = set()
    for path in (state_dir, state_dir / LOCK_FILE):
        with contextlib.suppress(OSError):
            inodes.add(path.stat().st_ino)
    try:
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        # "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF"
        if len(fields) >= 6 and fields[1] == "FLOCK" and _inode(fields[5]) in inodes:
            identity = ProcessIdentity.of(int(fields[4]))
            if identity is not None:
                return identity
    return None


def _inode(device_inode: str) -> int | None:
    _, _, inode = device_inode.rpartition(":")
    return int(inode) if inode.isdigit() else None


def _find_by_command_line(state_dir: Path) -> ProcessIdentity | None:
    wanted = ["-m", _SUPERVISOR_MODULE, str(state_dir)]
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().decode().split("\0")[:-1]
        except (OSError, UnicodeDecodeError):
            continue
        if argv[1:] == wanted:
            return ProcessIdentity.of(int(entry))
    return None


def _pidfd_of(identity: ProcessIdentity | None) -> int | None:
    """A pidfd of exactly that process, or None if it is gone (or pidfds are unsupported)."""
    if identity is None:
        return None
    try:
        pidfd = os.pidfd_open(identity.pid)
    except (AttributeError, OSError):
        return None
    # Checked after opening: from here on the pidfd names this process, whatever its pid.
    if identity.is_running():
        return pidfd
    os.close(pidfd)
    return None


def _supervisor_env() -> dict[str, str]:
    # No setting of jobd's, above all no token: the supervisor needs none of them.
    env = {key: value for key, value in os.environ.items() if not key.startswith("JOBD_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [_JOBD_HOME, env.get("PYTHONPATH")]))
    return env


def _read_status(state_dir: Path) -> ExitRecord | None:
    data = read_json(state_dir / STATUS_FILE)
    return None if data is None else ExitRecord.from_json(data)


def _identity(pid: object, start_time: object) -> ProcessIdentity | None:
    if isinstance(pid, int) and isinstance(start_time, int):
        return ProcessIdentity(pid, start_time)
    return None


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _str(value: object) -> str | None:
    return value if isinstance(value, str) else None
