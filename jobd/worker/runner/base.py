"""Types and shared plumbing for the workload runners.

A runner starts a job's processes and keeps a handle on all of them, so the agent
can wait, signal, stop and, after its own restart, re-attach to them (the shape of
Nomad's task drivers). The agent codes against the Protocols here; the concrete
runners only differ in how they contain the job (process group or systemd scope).
"""

from __future__ import annotations

import os
import subprocess
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from signal import SIGKILL, SIGTERM
from typing import IO, Protocol

import anyio
import anyio.abc

__all__ = [
    "POLL_INTERVAL_S",
    "AdoptedProcess",
    "Child",
    "EmptyByteStream",
    "ExitResult",
    "Handle",
    "HandleBase",
    "LaunchSpec",
    "MainProcess",
    "PipeStream",
    "ProcessIdentity",
    "Runner",
    "SpawnedProcess",
    "parse_state",
    "read_proc_stat",
    "spawn",
]

# How often to look for the main process's exit. asyncio's Process.wait() also waits
# for the pipes to close, which a grandchild holding stdout open can delay forever.
POLL_INTERVAL_S = 0.05


@dataclass(frozen=True)
class ExitResult:
    """How the main process of a job ended."""

    exit_code: int | None  # None when killed by a signal (or unknown)
    signal: int | None  # signal number that killed it, else None

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    @classmethod
    def from_returncode(cls, returncode: int) -> ExitResult:
        # asyncio/subprocess report "killed by signal N" as returncode -N.
        if returncode < 0:
            return cls(exit_code=None, signal=-returncode)
        return cls(exit_code=returncode, signal=None)


@dataclass(frozen=True)
class LaunchSpec:
    """What to run; argv is never passed through a shell."""

    argv: list[str]
    cwd: str
    env: dict[str, str]  # the complete environment of the workload
    unit_name: str  # e.g. "jobd-job-42"; systemd unit name / label


class Handle(Protocol):
    pid: int
    unit_name: str
    stdout: anyio.abc.ByteReceiveStream
    stderr: anyio.abc.ByteReceiveStream

    async def wait(self) -> ExitResult: ...

    async def signal(self, sig: int) -> None: ...

    async def stop(self, grace_s: float, sig: int = SIGTERM) -> ExitResult: ...

    def state(self) -> dict[str, object]: ...


class Runner(Protocol):
    name: str

    async def start(self, spec: LaunchSpec) -> Handle: ...

    async def recover(self, state: dict[str, object]) -> Handle | None: ...


@dataclass(frozen=True)
class ProcessIdentity:
    """A pid plus its kernel start time, so that a recycled pid is not taken for ours."""

    pid: int
    start_time: int  # clock ticks after boot, field 22 of /proc/<pid>/stat

    @classmethod
    def of(cls, pid: int) -> ProcessIdentity | None:
        stat = read_proc_stat(pid)
        return None if stat is None else cls(pid, stat[1])

    def is_running(self) -> bool:
        stat = read_proc_stat(self.pid)
        # A zombie has finished; only its parent's bookkeeping is left.
        return stat is not None and stat[1] == self.start_time and stat[0] not in "ZX"


def read_proc_stat(pid: int) -> tuple[str, int] | None:
    """(state letter, start time) of a process, or None if there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # The command name may contain spaces and parentheses; it ends at the last ')'.
    fields = raw[raw.rindex(b")") + 2 :].split()
    return fields[0].decode(), int(fields[19])


class EmptyByteStream(anyio.abc.ByteReceiveStream):
    """Stands in for the pipes of a re-attached workload, which we no longer hold."""

    async def receive(self, max_bytes: int = 65536) -> bytes:
        raise anyio.EndOfStream

    async def aclose(self) -> None:
        return None


class PipeStream(anyio.abc.ByteReceiveStream):
    """The read end of a child's pipe, read without blocking as the loop says it is ready."""

    def __init__(self, file: IO[bytes]) -> None:
        self._file = file
        self._fd = file.fileno()
        os.set_blocking(self._fd, False)

    async def receive(self, max_bytes: int = 65536) -> bytes:
        while True:
            try:
                data = os.read(self._fd, max_bytes)
            except BlockingIOError:
                await anyio.wait_readable(self._fd)
                continue
            if not data:
                raise anyio.EndOfStream
            return data

    async def aclose(self) -> None:
        if not self._file.closed:
            anyio.notify_closing(self._fd)
            self._file.close()


@dataclass
class Child:
    """A started workload: the Popen, and its output as streams."""

    popen: subprocess.Popen[bytes]
    stdout: PipeStream
    stderr: PipeStream

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def returncode(self) -> int | None:
        return self.popen.poll()  # reaps the child once it has exited; never blocks


async def spawn(argv: Sequence[str], cwd: str, env: Mapping[str, str] | None) -> Child:
    """Start argv, never via a shell, as the leader of a new session and process group.

    The new session also keeps the agent's terminal from signalling jobs (Ctrl-C).
    env None means the agent's own environment.

    A plain Popen (vfork and exec, a fraction of a millisecond), not asyncio's
    subprocess machinery, which spent several milliseconds of the loop per start on its
    transports and child watcher; the exit is seen through a pidfd (SpawnedProcess) and
    the pipes are read as the loop reports them readable.
    """
    popen = subprocess.Popen(
        list(argv),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=cwd,
        env=env,
        start_new_session=True,
    )
    assert popen.stdout is not None and popen.stderr is not None
    return Child(popen, PipeStream(popen.stdout), PipeStream(popen.stderr))


class MainProcess(ABC):
    """The job's main process, whose exit ends the job."""

    def __init__(self, identity: ProcessIdentity) -> None:
        self.identity = identity

    @abstractmethod
    def exit_result(self) -> ExitResult | None:
        """The result if the process has exited, else None (never blocks)."""

    async def exited(self) -> None:
        """Return soon after the process exits; the base case polls."""
        while self.exit_result() is None:
            await anyio.sleep(POLL_INTERVAL_S)


class SpawnedProcess(MainProcess):
    """Our own child: reaped, and its status read, once its pidfd says it has exited."""

    def __init__(self, process: Child) -> None:
        # -1 never matches: the child was reaped before we could read its start time.
        super().__init__(ProcessIdentity.of(process.pid) or ProcessIdentity(process.pid, -1))
        self._process = process
        self._pidfd = _open_pidfd(process.pid)

    def exit_result(self) -> ExitResult | None:
        returncode = self._process.returncode
        return None if returncode is None else ExitResult.from_returncode(returncode)

    async def exited(self) -> None:
        """A pidfd turns readable the moment the process exits: no poll interval to wait."""
        interval = POLL_INTERVAL_S
        if self._pidfd is not None and self.exit_result() is None:
            try:
                await anyio.wait_readable(self._pidfd)
            finally:
                os.close(self._pidfd)
                self._pidfd = None
        while self.exit_result() is None:  # no pidfd (an old kernel): look now and then
            await anyio.sleep(interval)


def _open_pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):  # an old kernel, or already reaped
        return None


class AdoptedProcess(MainProcess):
    """Started by an earlier agent: not our child, so only its disappearance is visible."""

    def exit_result(self) -> ExitResult | None:
        return None if self.identity.is_running() else ExitResult(exit_code=None, signal=None)


class HandleBase(ABC):
    """wait/stop logic shared by the runners; subclasses say how to signal the whole job."""

    def __init__(
        self,
        main: MainProcess,
        unit_name: str,
        stdout: anyio.abc.ByteReceiveStream | None = None,
        stderr: anyio.abc.ByteReceiveStream | None = None,
    ) -> None:
        self.pid = main.identity.pid
        self.unit_name = unit_name
        self.stdout: anyio.abc.ByteReceiveStream = stdout or EmptyByteStream()
        self.stderr: anyio.abc.ByteReceiveStream = stderr or EmptyByteStream()
        self._main = main
        self._result: ExitResult | None = None
        self._wait_lock = anyio.Lock()

    @abstractmethod
    async def signal(self, sig: int) -> None:
        """Send sig to every process of the job; no error if they are gone."""

    @abstractmethod
    def state(self) -> dict[str, object]:
        """JSON-able record from which the runner's recover() can re-attach."""

    async def wait(self) -> ExitResult:
        async with self._wait_lock:
            if self._result is None:
                self._result = await self._wait_main()
                # As Slurm does: nothing of a job may outlive its main process.
                with anyio.CancelScope(shield=True):
                    await self.signal(SIGKILL)
        return self._result

    async def stop(self, grace_s: float, sig: int = SIGTERM) -> ExitResult:
        if self._result is None:
            await self.signal(sig)
            with anyio.move_on_after(grace_s):
                await self.wait()
        # Also reached when the main process exited in time: its children may not have.
        await self.signal(SIGKILL)
        return await self.wait()

    async def _wait_main(self) -> ExitResult:
        await self._main.exited()
        result = self._main.exit_result()
        assert result is not None
        return result


def parse_state(state: dict[str, object], runner_name: str) -> tuple[str, ProcessIdentity]:
    """(unit name, main process identity) from a handle's state(); ValueError if malformed."""
    if state.get("runner") != runner_name:
        raise ValueError(f"state of runner {state.get('runner')!r}, not {runner_name!r}")
    unit_name, pid, start_time = state.get("unit_name"), state.get("pid"), state.get("start_time")
    if not (isinstance(unit_name, str) and isinstance(pid, int) and isinstance(start_time, int)):
        raise ValueError(f"malformed runner state: {state!r}")
    return unit_name, ProcessIdentity(pid, start_time)
