"""The per-job supervisor: a small process that outlives the agent (containerd's shim, slurmstepd).

Under systemd the agent starts one per job, in the job's scope, as `python -m
jobd.worker.supervisor STATE_DIR`; else its launcher (jobd.worker.supervisor_pool) keeps a
pool of them, each serving job after job (supervise_one), in a session of its own. It
starts the workload, points the workload's stdout and stderr straight at files, reaps it and
everything the job leaves behind, carries out a stop with the job's grace whether or not an
agent is running, and writes the exit durably at the job's end. An agent that dies or
restarts takes nothing of the job with it; the next one re-adopts the job from the state
directory (jobd.worker.supervision, the agent's side of this protocol).

Standard library only, and nothing of jobd's: it starts fast, and it must not depend on
whatever the agent's environment holds.

The state directory, one per job attempt:

    spec.json        only when started as `python -m jobd.worker.supervisor STATE_DIR` (the
                     systemd path): argv, cwd, env, grace_s, job_id, attempt, written by the
                     agent (0600), so nothing of the job travels on a command line; from the
                     launcher, the spec comes in the launch request and the directory's
                     existence marks the launch
    (the directory)  flock'ed until status.json is written: a held lock means the job is
                     supervised (by whichever process holds it: a pooled supervisor moves on)
    supervisor.json  the supervisor's and the workload's pids with their start times, the
                     job, attempt and grace: written once the workload runs
    stdout, stderr   the workload's fds 1 and 2, opened on the files in append mode
    stop             a stop request, written atomically by the agent: reason, grace_s
    stopping.json    the stop under way: when SIGTERM went, when SIGKILL is due and went
    status.json      the end: exit code, signal, times, the stop; written last, durably

Beside the state directories, `supervisors.log` takes every supervisor's own stderr (one
line per event, each prefixed with its pid; appended, so lines never interleave). A
state directory holds no file of the supervisor's own that a job does not need: on a busy
worker, every file made and removed per job costs the filesystem's inode allocator.

Every JSON file is replaced whole (temp file, fsync, rename, fsync of the directory).
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import functools
import json
import os
import select
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

__all__ = [
    "LOCK_FILE",
    "LOG_FILE",
    "RECORD_FILE",
    "SPEC_FILE",
    "STATUS_FILE",
    "STDERR_FILE",
    "STDOUT_FILE",
    "STOPPING_FILE",
    "STOP_FILE",
    "Wakeups",
    "become_subreaper",
    "libc",
    "lock_is_held",
    "log_event",
    "main",
    "no_children_left",
    "open_append",
    "read_json",
    "start_time",
    "supervise_one",
    "utc_now",
    "write_json_atomic",
]

SPEC_FILE = "spec.json"
# Where supervisors of jobd before 0.2 held their lock (an upgraded agent still sees it).
LOCK_FILE = "supervisor.lock"
RECORD_FILE = "supervisor.json"
STDOUT_FILE = "stdout"
STDERR_FILE = "stderr"
STOP_FILE = "stop"
STOPPING_FILE = "stopping.json"
STATUS_FILE = "status.json"
LOG_FILE = "supervisors.log"  # in the state directories' parent, shared

# A stop request whose wake-up signal was lost (or never sent) is still seen this soon.
STOP_FILE_POLL_S = 0.5
# How long the end keeps killing and reaping what the job left behind.
LEFTOVERS_TIMEOUT_S = 3.0
# What a shell reports for a command it could not run.
SPAWN_FAILED_EXIT = 127
EXIT_ALREADY_SUPERVISED = 3
EXIT_USAGE = 2

_STOP_SIGNALS = frozenset({signal.SIGTERM, signal.SIGUSR1})
# The agent's terminal going away must not end the job: noted, nothing more.
_SHRUGGED_SIGNALS = frozenset({signal.SIGINT, signal.SIGHUP})
_PR_SET_CHILD_SUBREAPER = 36


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def write_json_atomic(path: Path, data: dict[str, Any], durable: bool = True) -> None:
    """Replace path with data, so a reader sees the old whole file or the new, never a part.

    durable: fsync'd, so it survives a power cut too; without, it survives any process's
    death (what only this boot's processes need to read).
    """
    # Unique per thread too: an agent may save from several threads at once.
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        payload = json.dumps(data, sort_keys=True).encode() + b"\n"
        while payload:
            payload = payload[os.write(fd, payload) :]
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if not durable:
        return
    dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(dir_fd)  # the rename itself survives a power cut
    finally:
        os.close(dir_fd)


def read_json(path: Path) -> dict[str, Any] | None:
    """The object in path, or None if it is missing or not a JSON object."""
    try:
        data = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def lock_is_held(state_dir: Path) -> bool:
    """Whether a supervisor holds the state directory's lock, i.e. is alive."""
    return any(_held(path) for path in (state_dir, state_dir / LOCK_FILE))


def _held(path: Path) -> bool:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # also drops the shared lock we may have taken
    return False


def _take_lock(state_dir: Path) -> int | None:
    """The directory itself is locked: no file to make, none to remove."""
    fd = os.open(state_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd  # never closed: the lock goes with the process


def proc_stat(pid: int) -> list[str] | None:
    """Fields of /proc/PID/stat after the command name (state first), or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    # The command name may hold spaces and parentheses; it ends at the last ')'.
    return raw[raw.rindex(b")") + 2 :].decode().split()


def start_time(pid: int) -> int | None:
    """A process's start (clock ticks after boot): with the pid, it names one process."""
    fields = proc_stat(pid)
    return None if fields is None else int(fields[19])


_job_label = ""  # the state directory's name, set once a supervisor has one: the log is shared


def log_event(message: str) -> None:
    with contextlib.suppress(OSError, ValueError):
        who = f"jobd-supervisor[{os.getpid()}]{_job_label}"
        print(f"{utc_now()} {who}: {message}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Spec:
    argv: list[str]
    cwd: str
    env: dict[str, str]
    grace_s: float
    job_id: object
    attempt: object

    @classmethod
    def read(cls, path: Path) -> Spec:
        data = read_json(path)
        if data is None:
            raise ValueError(f"no launch spec at {path}")
        return cls.from_json(data)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Spec:
        argv, cwd, env = data.get("argv"), data.get("cwd"), data.get("env")
        grace = _grace(data.get("grace_s"))
        if not (isinstance(argv, list) and argv and all(isinstance(a, str) for a in argv)):
            raise ValueError("spec: argv must be a non-empty list of strings")
        if not (isinstance(env, dict) and all(isinstance(v, str) for v in env.values())):
            raise ValueError("spec: env must map strings to strings")
        if not isinstance(cwd, str) or grace is None:
            raise ValueError("spec: cwd must be a string and grace_s a number >= 0")
        return cls(argv, cwd, env, grace, data.get("job_id"), data.get("attempt"))


def _grace(value: object) -> float | None:
    """value as a grace in seconds, or None if it is not a number >= 0."""
    if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
        return float(value)
    return None


class Wakeups:
    """Signals turned into bytes on a pipe, so one select() waits for all of them."""

    SIGNALS = (signal.SIGCHLD, *_STOP_SIGNALS, *_SHRUGGED_SIGNALS)

    def __init__(self) -> None:
        self._read_fd, write_fd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
        for sig in self.SIGNALS:
            # A Python handler (not SIG_IGN, which a workload would inherit) that does nothing:
            # the C-level handler has already written the signal's number to the pipe.
            signal.signal(sig, lambda *_: None)

    def fileno(self) -> int:
        """Readable once a signal has arrived (for a select() over more than this)."""
        return self._read_fd

    def wait(self, timeout_s: float) -> set[int]:
        """The signals that arrived, waiting up to timeout_s for the first."""
        select.select([self._read_fd], [], [], max(0.0, timeout_s))
        return self.take()

    def take(self) -> set[int]:
        seen: set[int] = set()
        with contextlib.suppress(BlockingIOError):
            while chunk := os.read(self._read_fd, 512):
                seen.update(chunk)
        return seen


def open_append(path: Path) -> int:
    return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)


def _descendants(root: int) -> list[tuple[int, int]]:
    """(pid, pgid) of every descendant of root, from one walk of /proc."""
    children: dict[int, list[tuple[int, int]]] = {}
    with contextlib.suppress(OSError):
        for entry in os.listdir("/proc"):
            fields = proc_stat(int(entry)) if entry.isdigit() else None
            if fields is not None:
                children.setdefault(int(fields[1]), []).append((int(entry), int(fields[2])))
    found, frontier = [], [root]
    while frontier:
        kids = children.get(frontier.pop(), [])
        found.extend(kids)
        frontier.extend(pid for pid, _ in kids)
    return found


def _signal_quietly(send: Any, target: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        send(target, sig)


def signal_job(pgid: int, sig: int) -> None:
    """sig to the job's process group and to every descendant that left it.

    Being a subreaper, the supervisor is an ancestor of every process the job made, a
    double-forked daemon included. A group member is signalled once only: a workload must
    not see its SIGTERM handler run twice.
    """
    _signal_quietly(os.killpg, pgid, sig)
    for pid, group in _descendants(os.getpid()):
        if group != pgid:
            _signal_quietly(os.kill, pid, sig)


def no_children_left() -> bool:
    try:
        os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True
    return False


def _spawn_error(exc: Exception, cwd: str) -> str:
    """What went wrong, in words that name the culprit (a missing cwd is not a missing argv[0])."""
    if isinstance(exc, OSError):
        if not os.path.isdir(cwd):
            return f"the working directory {cwd} does not exist or is not a directory"
        return f"{exc.strerror or exc} (in {cwd})"
    return str(exc)


@functools.cache
def libc() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


def become_subreaper() -> None:
    """Orphans of the job are reparented to us, not to init, so they are found and reaped."""
    with contextlib.suppress(OSError, AttributeError):
        c_library = libc()
        if c_library is not None and c_library.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
            log_event("cannot become a child subreaper; daemonized processes may escape")


def _spawn(spec: Spec, state_dir: Path) -> int:
    """The workload's pid: it leads a session and process group of its own, its stdout and
    stderr appended to the files.

    posix_spawn (a vfork and an exec, no Python between them) costs a fraction of
    subprocess.Popen's setup. It takes no directory, so the supervisor steps into the
    job's for the spawn; and it looks argv[0] up in our PATH, so that is the job's.
    """
    out, err = open_append(state_dir / STDOUT_FILE), open_append(state_dir / STDERR_FILE)
    null = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    os.environ["PATH"] = spec.env.get("PATH", os.defpath)
    try:
        os.chdir(spec.cwd)
        return os.posix_spawnp(
            spec.argv[0],
            spec.argv,
            spec.env,
            file_actions=[
                (os.POSIX_SPAWN_DUP2, null, 0),
                (os.POSIX_SPAWN_DUP2, out, 1),
                (os.POSIX_SPAWN_DUP2, err, 2),
            ],
            setsid=True,
            # What Python ignores (and a workload must not inherit ignored), as Popen does.
            setsigdef=(signal.SIGPIPE, signal.SIGXFSZ),
        )
    finally:
        os.chdir("/")
        for fd in (null, out, err):
            os.close(fd)


class Supervisor:
    """One job's life, from its spec to its status.json."""

    def __init__(
        self,
        state_dir: Path,
        wakeups: Wakeups,
        on_started: Callable[[], None] | None = None,
        pokes_only: bool = False,
    ) -> None:
        self.state_dir = state_dir
        self.wakeups = wakeups
        self.on_started = on_started  # told once the workload runs (the launcher's reply)
        # SIGUSR1 only says "read the stop file" (a supervisor serving job after job)
        self.request_signals = _STOP_SIGNALS - {signal.SIGUSR1} if pokes_only else _STOP_SIGNALS
        self.spec: Spec | None = None
        self.pid: int | None = None  # the workload's, which is also its process group's id
        self.stop: dict[str, Any] | None = None
        self._kill_deadline: float | None = None  # monotonic
        self._last_request: dict[str, Any] | None = None
        self._status: dict[str, Any] = {"started_at": None, "workload_pid": None, "error": None}

    def run(self, spec: Spec | None = None) -> dict[str, Any]:
        """The job's whole life; spec None: read it from spec.json."""
        try:
            self.spec = spec = spec or Spec.read(self.state_dir / SPEC_FILE)
        except ValueError as exc:
            return self._finished(error=str(exc))
        self._take_stop_request(self.wakeups.take())
        if self.stop is not None:  # not started at all: the job ends stopped, never run
            return self._finished(error="stopped before the workload started")
        try:
            self.pid = pid = _spawn(spec, self.state_dir)
        except (OSError, ValueError, TypeError) as exc:  # a NUL byte raises ValueError
            return self._spawn_failed(exc)
        self._status.update(started_at=utc_now(), workload_pid=pid)
        if self.on_started is not None:
            self.on_started()  # first: the agent waits for it, and needs nothing below
        # One record, once the workload runs: until then the held lock alone says we live.
        self.write_record()
        self._supervise()
        return self._finished(returncode=self._end_job())

    def write_record(self) -> None:
        spec, pid = self.spec, self.pid
        # Pids and start times mean nothing after a reboot: no fsync for them.
        write_json_atomic(
            self.state_dir / RECORD_FILE,
            {
                "supervisor_pid": os.getpid(),
                "supervisor_start_time": start_time(os.getpid()),
                "workload_pid": pid,
                "workload_start_time": None if pid is None else start_time(pid),
                "pgid": pid,
                "job_id": None if spec is None else spec.job_id,
                "attempt": None if spec is None else spec.attempt,
                "grace_s": None if spec is None else spec.grace_s,
                "state_dir": str(self.state_dir),
                "started_at": self._status["started_at"],
            },
            durable=False,
        )

    def _supervise(self) -> None:
        """Until the workload exits: take stop requests, and SIGKILL at a stop's deadline."""
        signals: set[int] = set()
        while not self._workload_exited():
            self._take_stop_request(signals)
            self._kill_if_due()
            signals = self.wakeups.wait(self._timeout())

    def _timeout(self) -> float:
        if self._kill_deadline is None or self.stop is None or self.stop["sigkill_at"]:
            return STOP_FILE_POLL_S
        return min(STOP_FILE_POLL_S, self._kill_deadline - time.monotonic())

    def _workload_exited(self) -> bool:
        """Reap adopted orphans; the workload itself is left a zombie (see _end_job)."""
        while True:
            info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            if info is None:
                return False
            if info.si_pid == self.pid:
                return True
            with contextlib.suppress(ChildProcessError):
                os.waitpid(info.si_pid, 0)

    def _take_stop_request(self, signals: Iterable[int]) -> None:
        signals = set(signals)
        for sig in signals & _SHRUGGED_SIGNALS:
            log_event(f"{signal.Signals(sig).name} ignored: the job goes on")
        # With a request on file, a signal only says "look now"; without, it is the request.
        request = read_json(self.state_dir / STOP_FILE)
        if request is None and (stop_signals := signals & self.request_signals):
            request = {"reason": signal.Signals(min(stop_signals)).name}
        if request is not None and request != self._last_request:
            self._last_request = request
            self._begin_stop(request)

    def _begin_stop(self, request: dict[str, Any]) -> None:
        """SIGTERM now, SIGKILL after the grace; a later request may only bring that closer."""
        assert self.spec is not None
        grace_s = _grace(request.get("grace_s"))
        grace_s = self.spec.grace_s if grace_s is None else grace_s
        deadline = time.monotonic() + grace_s
        if self.stop is not None and (self._kill_deadline or 0) <= deadline:
            return
        kill_at = datetime.fromtimestamp(time.time() + grace_s, UTC).isoformat()
        if self.stop is None:
            self.stop = {"reason": str(request.get("reason") or "stop"), "sigkill_at": None}
            self.stop.update(requested_at=request.get("requested_at") or utc_now())
            self.stop.update(sigterm_at=utc_now())
            if self.pid is not None:
                signal_job(self.pid, signal.SIGTERM)
            log_event(f"stop ({self.stop['reason']}): SIGTERM sent, grace {grace_s}s")
        self.stop.update(grace_s=grace_s, kill_at=kill_at.replace("+00:00", "Z"))
        self._kill_deadline = deadline
        write_json_atomic(self.state_dir / STOPPING_FILE, self.stop)

    def _kill_if_due(self) -> None:
        if self.stop is None or self.stop["sigkill_at"] or self._kill_deadline is None:
            return
        if time.monotonic() >= self._kill_deadline:
            assert self.pid is not None
            signal_job(self.pid, signal.SIGKILL)
            self.stop["sigkill_at"] = utc_now()
            log_event("grace expired: SIGKILL sent")
            write_json_atomic(self.state_dir / STOPPING_FILE, self.stop)

    def _end_job(self) -> int:
        """Kill what is left of the job, reap it all; the workload's returncode.

        The workload is still a zombie here, so its pid, which names the group, cannot have
        been reused: the SIGKILL reaches the job's group and nobody else's.
        """
        assert self.pid is not None
        _signal_quietly(os.killpg, self.pid, signal.SIGKILL)
        _, wait_status = os.waitpid(self.pid, 0)
        if no_children_left():
            # Being a subreaper, any process the job left would be our child by now.
            return os.waitstatus_to_exitcode(wait_status)
        signal_job(self.pid, signal.SIGKILL)
        deadline = time.monotonic() + LEFTOVERS_TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                reaped, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break  # no children left at all
            if reaped == 0:  # some still dying, or newly adopted: kill again, wait a little
                signal_job(self.pid, signal.SIGKILL)
                self.wakeups.wait(0.05)
        return os.waitstatus_to_exitcode(wait_status)

    def _spawn_failed(self, exc: Exception) -> dict[str, Any]:
        assert self.spec is not None
        message = f"jobd: cannot start {self.spec.argv[0]!r}: {_spawn_error(exc, self.spec.cwd)}\n"
        fd = open_append(self.state_dir / STDERR_FILE)
        try:
            os.write(fd, message.encode())
        finally:
            os.close(fd)
        return self._finished(returncode=SPAWN_FAILED_EXIT, error=message.strip())

    def _finished(self, returncode: int | None = None, error: str | None = None) -> dict[str, Any]:
        sig = -returncode if returncode is not None and returncode < 0 else None
        spec = self.spec
        return {
            **self._status,
            "job_id": None if spec is None else spec.job_id,
            "attempt": None if spec is None else spec.attempt,
            "exit_code": returncode if sig is None else None,
            "signal": sig,
            "signal_name": None if sig is None else signal.Signals(sig).name,
            "finished_at": utc_now(),
            "stop": self.stop,
            "error": error,
        }


def supervise(
    state_dir: Path,
    on_started: Callable[[], None] | None = None,
    spec: dict[str, Any] | None = None,
) -> int:
    """Be state_dir's supervisor until the job is over; the process's exit code.

    on_started: told once the workload runs (from then on a stop reaches the workload).
    spec: the launch spec, from the launcher's request (None: read it from spec.json,
    which whoever started us wrote).
    """
    wakeups = Wakeups()  # first: a stop signal must never find the default action
    os.chdir("/")  # keep no directory of the agent's busy
    become_subreaper()
    return supervise_one(state_dir, wakeups, on_started, spec)


def supervise_one(
    state_dir: Path,
    wakeups: Wakeups,
    on_started: Callable[[], None] | None = None,
    spec: dict[str, Any] | None = None,
    pokes_only: bool = False,
) -> int:
    """One job in state_dir, from its lock to its status.json; the lock is released after.

    A process that serves job after job (pokes_only) takes a stop signal as "read your
    stop file" only: a late signal meant for an earlier job must never stop this one.
    """
    global _job_label
    _job_label = f" {state_dir.name}"
    lock = _take_lock(state_dir)
    if lock is None or (state_dir / STATUS_FILE).exists():
        log_event(f"{state_dir} has a live supervisor or a finished job already")
        if lock is not None:
            os.close(lock)
        return EXIT_ALREADY_SUPERVISED
    try:
        parsed = None if spec is None else Spec.from_json(spec)
    except ValueError as exc:
        status = Supervisor(state_dir, wakeups)._finished(error=str(exc))
    else:
        status = Supervisor(state_dir, wakeups, on_started, pokes_only).run(parsed)
    write_json_atomic(state_dir / STATUS_FILE, status)
    os.close(lock)  # after status.json: a released lock and no status means a lost job
    if status["error"] or status["stop"]:  # the usual end is in status.json alone
        log_event(f"job over: exit_code={status['exit_code']} signal={status['signal_name']}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m jobd.worker.supervisor STATE_DIR", file=sys.stderr)
        return EXIT_USAGE
    return supervise(Path(args[0]).resolve())


if __name__ == "__main__":
    sys.exit(main())
