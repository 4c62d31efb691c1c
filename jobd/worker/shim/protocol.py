"""What the agent and a shim say to each other, each message declared once.

The shim (jobd.worker.shim.process) and the agent (jobd.worker.shim.client) both use these
types; nothing else defines the launch spec, the status record or the request and reply
lines. Each JSON document carries `version` (PROTOCOL_VERSION); a document without one is
of the form jobd wrote before it was versioned, which is the same form, so it is read
alike. Readers take what they know and ignore the rest, so either side may be a release
ahead.

A job attempt's state directory (jobd.worker.shim.statedir writes every file whole):

    spec.json        LaunchSpec, for a shim started on its own (jobd.worker.shim.process
                     STATE_DIR, the systemd path): written by the
                     agent (0600), so nothing of the job travels on a command line
    (the directory)  flock'ed until status.json is written: a held lock means the job is
                     supervised (by whichever process holds it: a serving shim moves on)
    supervisor.json  ShimRecord: the shim's and the workload's pids and start times
    stdout, stderr   the workload's fds 1 and 2, opened on the files in append mode
    stop             StopRequest, written by the agent
    stopping.json    StopRecord: the stop under way (SIGTERM sent, SIGKILL due and sent)
    status.json      ExitStatus: the end, written last and durably

A serving shim's pipes carry one line per message: LaunchRequest (JSON) from the agent on
its stdin, and the replies `ID PID START_TIME` (Started) and `ID end` or `ID end idle`
(Ended; idle: it reads the next request) on a pipe all of the agent's shims share. Such a
shim is the agent's own child, always of the same release, so the replies carry no
version of their own.

Standard library only.
"""

from __future__ import annotations

import time

from jobd.worker.shim import jsontext
from jobd.worker.shim.procfs import ProcessIdentity
from jobd.worker.shim.record import Record

# typing.TYPE_CHECKING without importing typing, which would cost every shim 0.4 MiB.
TYPE_CHECKING = False
if TYPE_CHECKING:
    import signal as _signal
    from typing import Any
else:
    import _signal  # the signal module's C half: its Python half imports enum

__all__ = [
    "LEGACY_LOCK_FILE",
    "LEGACY_SHIM_MODULE",
    "LOG_FILE",
    "PROTOCOL_VERSION",
    "RECORD_FILE",
    "SERVE_FLAG",
    "SHIM_MODULE",
    "SPEC_FILE",
    "STATUS_FILE",
    "STDERR_FILE",
    "STDOUT_FILE",
    "STOPPING_FILE",
    "STOP_FILE",
    "Ended",
    "ExitStatus",
    "LaunchRequest",
    "LaunchSpec",
    "ShimRecord",
    "Started",
    "StopRecord",
    "StopRequest",
    "as_grace",
    "as_int",
    "as_str",
    "bootstrap",
    "decode_reply",
    "signal_name",
    "utc_at",
    "utc_now",
]

PROTOCOL_VERSION = 1

SPEC_FILE = "spec.json"
RECORD_FILE = "supervisor.json"
STDOUT_FILE = "stdout"
STDERR_FILE = "stderr"
STOP_FILE = "stop"
STOPPING_FILE = "stopping.json"
STATUS_FILE = "status.json"
LOG_FILE = "supervisors.log"  # in the state directories' parent, shared by every shim
# Where shims of jobd before 0.2 held their lock (an upgraded agent still sees it).
LEGACY_LOCK_FILE = "supervisor.lock"

# The command line that starts a shim; a shim whose record is lost is found by its
# command line, whichever release started it (`-m MODULE STATE_DIR` before the bootstrap
# below). `SHIM_MODULE --serve UMASK` serves the agent's requests instead.
SHIM_MODULE = "jobd.worker.shim.process"
SERVE_FLAG = "--serve"
LEGACY_SHIM_MODULE = "jobd.worker.supervisor"


def bootstrap(module: str) -> str:
    """The code of `python -I -S -c CODE JOBD_HOME ARGS...`: jobd's directory first on
    sys.path (-I drops PYTHONPATH, -S site-packages), then module's main() with ARGS."""
    return (
        "import sys; sys.path.insert(0, sys.argv.pop(1)); "
        f"from {module} import main; sys.exit(main())"
    )


def utc_now() -> str:
    return utc_at(time.time())


def utc_at(timestamp: float) -> str:
    """A time.time() as the shim's files write times: ISO 8601, microseconds, `Z` (as
    datetime writes it, rounding half to even; without datetime, 0.7 MiB of a shim)."""
    seconds = int(timestamp // 1)
    micros = round((timestamp - seconds) * 1e6)
    if micros >= 1_000_000:
        seconds, micros = seconds + 1, micros - 1_000_000
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{micros:06d}Z"


def signal_name(number: int) -> str:
    """The name signal.Signals(number).name gives (of a number's names, the first in
    order), without the signal module's enum: 0.8 MiB of every shim."""
    names = [
        name
        for name, value in vars(_signal).items()
        if value == number and name.startswith("SIG") and not name.startswith("SIG_")
    ]
    if not names:
        raise ValueError(f"{number} is not a valid Signals")
    return min(names)


def as_int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def as_str(value: object) -> str | None:
    return value if isinstance(value, str) else None


def as_grace(value: object) -> float | None:
    """value as a grace in seconds, or None if it is not a number >= 0."""
    if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
        return float(value)
    return None


class LaunchSpec(Record):
    """What a shim runs; argv is never passed through a shell."""

    def __init__(
        self,
        argv: list[str],
        cwd: str,
        env: dict[str, str],  # the complete environment of the workload
        grace_s: float,  # of a stop that names none (a SIGTERM to the shim, say)
        job_id: int | None,
        attempt: int | None,
        # Cores and memory, as jobd.worker.shim.limits.Limits reads them; None: no limits.
        limits: dict[str, Any] | None = None,
        # The Unix user the workload runs as (jobd.worker.shim.owner), set by a root agent
        # for a job of an owner; None: as the shim's own user.
        owner: str | None = None,
    ) -> None:
        self.argv, self.cwd, self.env, self.grace_s = argv, cwd, env, grace_s
        self.job_id, self.attempt, self.limits, self.owner = job_id, attempt, limits, owner

    def to_dict(self) -> dict[str, Any]:
        # Not asdict(): that deep-copies the environment, ~1 ms a job.
        data = {
            "version": PROTOCOL_VERSION,
            "argv": self.argv,
            "cwd": self.cwd,
            "env": self.env,
            "grace_s": self.grace_s,
            "job_id": self.job_id,
            "attempt": self.attempt,
        }
        if self.limits is not None:  # only then: a job naming none costs nothing more
            data["limits"] = self.limits
        if self.owner is not None:  # only then: a job of no owner sends what it did
            data["owner"] = self.owner
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LaunchSpec:
        """The spec in data; ValueError naming what no shim can run."""
        argv, cwd, env = data.get("argv"), data.get("cwd"), data.get("env")
        grace = as_grace(data.get("grace_s"))
        if not (isinstance(argv, list) and argv and all(isinstance(a, str) for a in argv)):
            raise ValueError("spec: argv must be a non-empty list of strings")
        if not (isinstance(env, dict) and all(isinstance(v, str) for v in env.values())):
            raise ValueError("spec: env must map strings to strings")
        if not isinstance(cwd, str) or grace is None:
            raise ValueError("spec: cwd must be a string and grace_s a number >= 0")
        job_id, attempt = as_int(data.get("job_id")), as_int(data.get("attempt"))
        limits = data.get("limits")
        if limits is not None and not isinstance(limits, dict):
            raise ValueError("spec: limits must be an object")
        owner = data.get("owner")
        if owner is not None and not (isinstance(owner, str) and owner):
            raise ValueError("spec: owner must be a user name")
        return cls(argv, cwd, env, grace, job_id, attempt, limits, owner)


class StopRequest(Record):
    """The agent's `stop` file: SIGTERM now, SIGKILL after grace_s (None: the spec's)."""

    def __init__(
        self, reason: str, grace_s: float | None = None, requested_at: str | None = None
    ) -> None:
        self.reason, self.grace_s, self.requested_at = reason, grace_s, requested_at

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": PROTOCOL_VERSION,
            "reason": self.reason,
            "grace_s": self.grace_s,
            "requested_at": self.requested_at,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StopRequest:
        reason = str(data.get("reason") or "stop")
        return cls(reason, as_grace(data.get("grace_s")), as_str(data.get("requested_at")))


class StopRecord(Record):
    """stopping.json: a stop the shim carries out, when SIGTERM went, when SIGKILL is due
    and when it went. A later request may bring kill_at closer (never push it back)."""

    def __init__(
        self,
        reason: str,
        grace_s: float,
        requested_at: str,
        sigterm_at: str,
        kill_at: str,
        sigkill_at: str | None = None,
    ) -> None:
        self.reason, self.grace_s, self.requested_at = reason, grace_s, requested_at
        self.sigterm_at, self.kill_at, self.sigkill_at = sigterm_at, kill_at, sigkill_at

    def to_dict(self) -> dict[str, Any]:
        return {
            "reason": self.reason,
            "grace_s": self.grace_s,
            "requested_at": self.requested_at,
            "sigterm_at": self.sigterm_at,
            "kill_at": self.kill_at,
            "sigkill_at": self.sigkill_at,
        }

    @classmethod
    def from_dict(cls, data: object) -> StopRecord | None:
        if not isinstance(data, dict):
            return None
        try:
            return cls(
                data["reason"],
                data["grace_s"],
                data["requested_at"],
                data["sigterm_at"],
                data["kill_at"],
                data["sigkill_at"],
            )
        except KeyError:
            return None


class ExitStatus(Record):
    """status.json: how a job ended (or, lost, that nobody can say)."""

    def __init__(
        self,
        exit_code: int | None,  # None when killed by a signal, or unknown
        signal: int | None,
        signal_name: str | None,
        started_at: str | None,
        finished_at: str | None,
        workload_pid: int | None,
        stop: StopRecord | None,
        error: str | None,  # why the workload never ran, or why its end is unknown
        job_id: int | None = None,
        attempt: int | None = None,
        lost: bool = False,  # the shim ended without recording the job's end (never written)
        # Why the job was ended for its memory (with the peak); None: it was not.
        memory_exceeded: str | None = None,
    ) -> None:
        self.exit_code, self.signal, self.signal_name = exit_code, signal, signal_name
        self.started_at, self.finished_at = started_at, finished_at
        self.workload_pid, self.stop, self.error = workload_pid, stop, error
        self.job_id, self.attempt, self.lost = job_id, attempt, lost
        self.memory_exceeded = memory_exceeded

    @classmethod
    def of(
        cls,
        returncode: int | None,
        error: str | None,
        workload: tuple[str, int] | None,
        stop: StopRecord | None,
        spec: LaunchSpec | None,
        memory_exceeded: str | None = None,
    ) -> ExitStatus:
        """The end of a run: returncode as waitstatus_to_exitcode gives it (None: the
        workload never ran), workload its start time and pid if it started."""
        sig = -returncode if returncode is not None and returncode < 0 else None
        return cls(
            exit_code=returncode if sig is None else None,
            signal=sig,
            signal_name=None if sig is None else signal_name(sig),
            started_at=None if workload is None else workload[0],
            finished_at=utc_now(),
            workload_pid=None if workload is None else workload[1],
            stop=stop,
            error=error,
            job_id=None if spec is None else spec.job_id,
            attempt=None if spec is None else spec.attempt,
            memory_exceeded=memory_exceeded,
        )

    @classmethod
    def unrecorded(cls) -> ExitStatus:
        error = "the supervisor ended without recording the job's end"
        return cls(None, None, None, None, None, None, None, error, lost=True)

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": PROTOCOL_VERSION,
            "exit_code": self.exit_code,
            "signal": self.signal,
            "signal_name": self.signal_name,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "workload_pid": self.workload_pid,
            "stop": None if self.stop is None else self.stop.to_dict(),
            "error": self.error,
            "job_id": self.job_id,
            "attempt": self.attempt,
            "memory_exceeded": self.memory_exceeded,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ExitStatus:
        return cls(
            exit_code=as_int(data.get("exit_code")),
            signal=as_int(data.get("signal")),
            signal_name=as_str(data.get("signal_name")),
            started_at=as_str(data.get("started_at")),
            finished_at=as_str(data.get("finished_at")),
            workload_pid=as_int(data.get("workload_pid")),
            stop=StopRecord.from_dict(data.get("stop")),
            error=as_str(data.get("error")),
            job_id=as_int(data.get("job_id")),
            attempt=as_int(data.get("attempt")),
            memory_exceeded=as_str(data.get("memory_exceeded")),
        )


class ShimRecord(Record):
    """supervisor.json: which process the shim is and which the workload is, written once
    the workload runs (pids mean nothing after a reboot: it is never fsync'd)."""

    def __init__(
        self,
        shim: ProcessIdentity,
        workload: ProcessIdentity | None,  # None until the workload has started
        job_id: int | None,
        attempt: int | None,
        grace_s: float | None = None,
        state_dir: str | None = None,
        started_at: str | None = None,
    ) -> None:
        self.shim, self.workload, self.job_id, self.attempt = shim, workload, job_id, attempt
        self.grace_s, self.state_dir, self.started_at = grace_s, state_dir, started_at

    def to_dict(self) -> dict[str, Any]:
        workload = self.workload
        return {
            "version": PROTOCOL_VERSION,
            "supervisor_pid": self.shim.pid,
            "supervisor_start_time": self.shim.start_time,
            "workload_pid": None if workload is None else workload.pid,
            "workload_start_time": None if workload is None else workload.start_time,
            "pgid": None if workload is None else workload.pid,  # it leads its group
            "job_id": self.job_id,
            "attempt": self.attempt,
            "grace_s": self.grace_s,
            "state_dir": self.state_dir,
            "started_at": self.started_at,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ShimRecord | None:
        shim = _identity(data.get("supervisor_pid"), data.get("supervisor_start_time"))
        if shim is None:
            return None
        return cls(
            shim=shim,
            workload=_identity(data.get("workload_pid"), data.get("workload_start_time")),
            job_id=as_int(data.get("job_id")),
            attempt=as_int(data.get("attempt")),
            grace_s=as_grace(data.get("grace_s")),
            state_dir=as_str(data.get("state_dir")),
            started_at=as_str(data.get("started_at")),
        )


def _identity(pid: object, start_time: object) -> ProcessIdentity | None:
    pid, start_time = as_int(pid), as_int(start_time)
    return None if pid is None or start_time is None else ProcessIdentity(pid, start_time)


class LaunchRequest(Record):
    """One line to a serving shim: run spec in state_dir (whose creation marks the launch)."""

    def __init__(self, id: int, state_dir: str, spec: LaunchSpec) -> None:
        self.id, self.state_dir, self.spec = id, state_dir, spec

    def encode(self) -> bytes:
        body = {"version": PROTOCOL_VERSION, "id": self.id, "state_dir": self.state_dir}
        return jsontext.dumps({**body, "spec": self.spec.to_dict()}).encode() + b"\n"

    @staticmethod
    def decode_head(line: bytes) -> tuple[int, str, dict[str, Any]]:
        """(id, state directory, the spec's raw dict): the spec is parsed by the shim that
        runs it, so a bad one ends that job alone, with its reason in status.json."""
        data = jsontext.loads(line)
        return int(data["id"]), str(data["state_dir"]), data["spec"]


class Started(Record):
    """Reply: the workload of request `id` runs under shim `pid` (0: the state directory
    holds a launch already, and never gets a second copy)."""

    def __init__(self, id: int, pid: int, start_time: int) -> None:
        self.id, self.pid, self.start_time = id, pid, start_time

    def encode(self) -> bytes:
        return f"{self.id} {self.pid} {self.start_time}\n".encode()


class Ended(Record):
    """Reply: the job of request `id` is over, its status.json written, its lock released;
    idle: the shim now waits for another request (else it exits)."""

    def __init__(self, id: int, idle: bool = False) -> None:
        self.id, self.idle = id, idle

    def encode(self) -> bytes:
        return f"{self.id} end idle\n".encode() if self.idle else f"{self.id} end\n".encode()


def decode_reply(line: bytes) -> Started | Ended:
    request_id, *answer = line.split()
    if answer[:1] == [b"end"]:
        return Ended(int(request_id), answer[1:] == [b"idle"])
    pid, start_time = (int(field) for field in answer)
    return Started(int(request_id), pid, start_time)
