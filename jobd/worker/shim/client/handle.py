"""One job's shim as the agent sees it: find it again, stop it, read its end.

Everything goes through the job's state directory (see jobd.worker.shim.protocol), so a
shim launched by an earlier agent is worked with exactly as one launched by this agent.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio

from jobd.worker.shim.procfs import ProcessIdentity
from jobd.worker.shim.protocol import (
    LEGACY_LOCK_FILE,
    LEGACY_SHIM_MODULE,
    RECORD_FILE,
    SHIM_MODULE,
    STATUS_FILE,
    STDERR_FILE,
    STDOUT_FILE,
    STOP_FILE,
    STOPPING_FILE,
    ExitStatus,
    ShimRecord,
    StopRecord,
    StopRequest,
    bootstrap,
    utc_now,
)
from jobd.worker.shim.statedir import lock_is_held, read_json, write_json_atomic

__all__ = ["END_CHECK_S", "Shim", "adopt", "is_shim_command", "read_record", "scan"]

# How often wait() looks when the kernel cannot say (no pidfd), and started() in any case.
POLL_INTERVAL_S = 0.02
# How long a wait for a job's end goes without looking at its state directory: a shim that
# died (kill -9) says nothing, and its released lock tells.
END_CHECK_S = 0.5


def read_record(state_dir: Path) -> ShimRecord | None:
    """supervisor.json, if the shim has written it (once the workload runs)."""
    data = read_json(state_dir / RECORD_FILE)
    return None if data is None else ShimRecord.from_dict(data)


def _read_status(state_dir: Path) -> ExitStatus | None:
    data = read_json(state_dir / STATUS_FILE)
    return None if data is None else ExitStatus.from_dict(data)


class Shim:
    """One job's shim, launched by this agent or adopted from an earlier one."""

    def __init__(
        self,
        state_dir: Path,
        identity: ProcessIdentity | None = None,
        child: subprocess.Popen[bytes] | None = None,
        ended: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.state_dir = state_dir
        self._identity = identity
        self._child = child  # set when this agent started it as a process: it must reap it
        # Returns once the pool says the job is over (or after a while anyway).
        self._ended = ended

    @property
    def identity(self) -> ProcessIdentity | None:
        """The shim process as launched or adopted (None: known by its files only)."""
        return self._identity

    @property
    def stdout_path(self) -> Path:
        return self.state_dir / STDOUT_FILE

    @property
    def stderr_path(self) -> Path:
        return self.state_dir / STDERR_FILE

    def record(self) -> ShimRecord | None:
        return read_record(self.state_dir)

    def is_alive(self) -> bool:
        if self._child is not None:
            # Our child: alive until reaped (poll() reaps), even before it takes its lock.
            return self._child.poll() is None
        return lock_is_held(self.state_dir)

    def status(self) -> ExitStatus | None:
        """None while the shim runs the job, else how the job ended."""
        finished = _read_status(self.state_dir)
        if finished is not None or self.is_alive():
            return finished
        # status.json is written before the shim exits: look again, it may be new.
        return _read_status(self.state_dir) or ExitStatus.unrecorded()

    def stopping(self) -> StopRecord | None:
        """The stop under way (its deadline is the shim's), if one is."""
        return StopRecord.from_dict(read_json(self.state_dir / STOPPING_FILE))

    def request_stop(self, grace_s: float | None, reason: str) -> None:
        """Ask for SIGTERM, then SIGKILL after grace_s (None: the spec's grace).

        The request is a file, so it holds even if this agent dies now; the signal only
        makes the shim look at once. A second request can bring SIGKILL closer, never
        push it back.
        """
        request = StopRequest(reason, grace_s, utc_now())
        write_json_atomic(self.state_dir / STOP_FILE, request.to_dict())
        self._signal(signal.SIGUSR1)

    async def started(self, timeout_s: float = 10.0) -> ShimRecord:
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

    async def wait(self) -> ExitStatus:
        """How the job ended, once its status.json is written (or its shim lost).

        A shim may live on to serve another job: its word (from the pool), or else its
        exit, only says when to look again at the state directory.
        """
        while (finished := self.status()) is None:
            if self._ended is not None:
                await self._ended()
            else:
                await self._exited()
        return finished

    async def _exited(self) -> None:
        """Return soon after the shim exits (from a pidfd, else by polling), or after
        END_CHECK_S: an adopted shim may be a pooled one, ending the job and not itself."""
        pidfd = _pidfd_of(self._process())
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

    def _process(self) -> ProcessIdentity | None:
        if self._child is not None:
            # Our unreaped child: its pid cannot have been reused.
            return ProcessIdentity.of(self._child.pid)
        if self._identity is None:
            record = self.record()
            self._identity = None if record is None else record.shim
        return self._identity

    def _signal(self, sig: int) -> bool:
        # Only a shim known to have its handlers in place (before that, SIGUSR1's default
        # action would kill it): one that answered its launch, holds its lock, or wrote its
        # record. The stop file alone reaches it within its poll interval.
        identity = self._identity
        if identity is None:
            record = self.record()
            identity = None if record is None else record.shim
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


def adopt(state_dir: Path) -> Shim | None:
    """The job in state_dir if its shim is alive and the one recorded, or has finished.

    None when nothing was launched there, when the recorded process is not the shim (a
    reused pid), or when the shim died without recording the job's end.
    """
    state_dir = state_dir.resolve()
    if (state_dir / STATUS_FILE).exists():
        return Shim(state_dir)
    if lock_is_held(state_dir):
        record = read_record(state_dir)
        identity = _find_shim(state_dir) if record is None else record.shim
        if identity is not None and identity.is_running():
            return Shim(state_dir, identity=identity)
    # It may have finished while we looked.
    return Shim(state_dir) if (state_dir / STATUS_FILE).exists() else None


def scan(root: Path) -> list[Shim]:
    """Every state directory under root whose shim is alive or has finished."""
    if not root.is_dir():
        return []
    found = (adopt(entry) for entry in sorted(root.iterdir()) if entry.is_dir())
    return [shim for shim in found if shim is not None]


def _find_shim(state_dir: Path) -> ProcessIdentity | None:
    """The shim of state_dir, for when its record is lost: by the lock it holds, else by
    its command line."""
    return _lock_holder(state_dir) or _find_by_command_line(state_dir)


def _lock_holder(state_dir: Path) -> ProcessIdentity | None:
    """The process holding the directory's flock (or an older shim's lock file's), as
    /proc/locks names it (by inode)."""
    inodes = set()
    for path in (state_dir, state_dir / LEGACY_LOCK_FILE):
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
    """A shim started alone for state_dir, by this release or one before the shim's name."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().decode().split("\0")[:-1]
        except (OSError, UnicodeDecodeError):
            continue
        if is_shim_command(argv, state_dir):
            return ProcessIdentity.of(int(entry))
    return None


def is_shim_command(argv: list[str], state_dir: Path) -> bool:
    """Whether argv starts a shim of its own for state_dir: `-c BOOTSTRAP JOBD_HOME
    STATE_DIR` (starting.shim_command), or `-m MODULE STATE_DIR` as releases before it
    started one."""
    if argv[-1:] != [str(state_dir)]:
        return False
    if argv[-3:-1] in (["-m", SHIM_MODULE], ["-m", LEGACY_SHIM_MODULE]):
        return True
    return argv[-4:-2] == ["-c", bootstrap(SHIM_MODULE)]


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
