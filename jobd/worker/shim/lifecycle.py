"""One job's life inside a shim: from its spec to its status.json.

The shim starts the workload, points its stdout and stderr straight at files, takes stop
requests (SIGTERM, the grace, SIGKILL) whether or not an agent is running, reaps the
workload and everything the job leaves behind, and writes the end durably. The state
directory's lock is held from the start to status.json; then the shim may serve another
job (jobd.worker.shim.process).

Standard library only, and what a job without limits or owner needs: the limits'
enforcer (jobd.worker.shim.limits) and the owner's spawn (jobd.worker.shim.owner) are
imported by the first launch that names them, so an idle shim is as small as it can be.
Paths are strings (pathlib is 2 MiB of a shim).
"""

from __future__ import annotations

import os
import time

from jobd.worker.shim.log import log_event, serving
from jobd.worker.shim.procfs import ProcessIdentity
from jobd.worker.shim.protocol import (
    RECORD_FILE,
    SPEC_FILE,
    STATUS_FILE,
    STDERR_FILE,
    STDOUT_FILE,
    STOP_FILE,
    STOPPING_FILE,
    ExitStatus,
    LaunchSpec,
    ShimRecord,
    StopRecord,
    StopRequest,
    signal_name,
    utc_at,
    utc_now,
)
from jobd.worker.shim.signals import (
    SHRUGGED_SIGNALS,
    STOP_SIGNALS,
    Wakeups,
    no_children_left,
    signal_job,
    signal_quietly,
)
from jobd.worker.shim.statedir import open_append, read_json, take_lock, write_json_atomic

# typing.TYPE_CHECKING without importing typing, which would cost every shim 0.4 MiB.
TYPE_CHECKING = False
if TYPE_CHECKING:
    import signal
    from collections.abc import Callable, Iterable
    from typing import Any

    from jobd.worker.shim.limits import Enforcer
else:
    import _signal as signal  # the signal module's C half: its Python half imports enum

__all__ = ["EXIT_ALREADY_SERVED", "own_identity", "run_job"]

# A stop request whose wake-up signal was lost (or never sent) is still seen this soon.
STOP_FILE_POLL_S = 0.5
# How long the end keeps killing and reaping what the job left behind.
LEFTOVERS_TIMEOUT_S = 3.0
# What a shell reports for a command it could not run.
SPAWN_FAILED_EXIT = 127
EXIT_ALREADY_SERVED = 3


def run_job(
    state_dir: str,
    wakeups: Wakeups,
    spec: dict[str, Any] | None = None,
    on_started: Callable[[], None] | None = None,
    pokes_only: bool = False,
) -> int:
    """One job in state_dir, from its lock to its status.json; the lock is released after.

    spec: the launch spec as sent (None: read it from spec.json). on_started: told once
    the workload runs (from then on a stop reaches it). A shim serving job after job
    (pokes_only) takes a stop signal as "read your stop file" only: a late signal meant
    for an earlier job must never stop this one.
    """
    serving(os.path.basename(state_dir))
    lock = take_lock(state_dir)
    if lock is None or os.path.exists(f"{state_dir}/{STATUS_FILE}"):
        log_event(f"{state_dir} has a live shim or a finished job already")
        if lock is not None:
            os.close(lock)
        return EXIT_ALREADY_SERVED
    status = _JobRun(state_dir, wakeups, on_started, pokes_only).run(spec)
    write_json_atomic(f"{state_dir}/{STATUS_FILE}", status.to_dict())
    os.close(lock)  # after status.json: a released lock and no status means a lost job
    if status.error or status.stop:  # the usual end is in status.json alone
        log_event(f"job over: exit_code={status.exit_code} signal={status.signal_name}")
    return 0


_own: ProcessIdentity | None = None


def own_identity() -> ProcessIdentity | None:
    """This process's identity, read from /proc once per process (a forked shim reads its
    own), not once per job."""
    global _own
    if _own is None or _own.pid != os.getpid():
        _own = ProcessIdentity.of(os.getpid())
    return _own


def _spawn(spec: LaunchSpec, state_dir: str) -> int:
    """The workload's pid: it leads a session and process group of its own, its stdout and
    stderr appended to the files.

    posix_spawn (a vfork and an exec, no Python between them) costs a fraction of
    subprocess.Popen's setup. It takes no directory, so the shim steps into the job's for
    the spawn; and it looks argv[0] up in our PATH, so that is the job's.
    """
    out = open_append(f"{state_dir}/{STDOUT_FILE}")
    err = open_append(f"{state_dir}/{STDERR_FILE}")
    null = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    if spec.owner is not None:  # a root worker's job of an owner: as the owner
        # Imported by the first launch of an owner's job only.
        from jobd.worker.shim.owner import spawn_owned

        try:
            stdio = [null, out, err]
            return spawn_owned(spec.owner, spec.argv, spec.cwd, spec.env, stdio, state_dir)
        finally:
            for fd in (null, out, err):
                os.close(fd)
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


def _spawn_error(exc: Exception, cwd: str) -> str:
    """What went wrong, in words that name the culprit (a missing cwd is not a missing argv[0])."""
    if isinstance(exc, OSError):
        if not os.path.isdir(cwd):
            return f"the working directory {cwd} does not exist or is not a directory"
        return f"{exc.strerror or exc} (in {cwd})"
    return str(exc)


class _JobRun:
    """One job's life, from its spec to its exit status."""

    def __init__(
        self,
        state_dir: str,
        wakeups: Wakeups,
        on_started: Callable[[], None] | None,
        pokes_only: bool,
    ) -> None:
        self.state_dir = state_dir
        self.wakeups = wakeups
        self.on_started = on_started  # told once the workload runs (the pool's reply)
        # SIGUSR1 only says "read the stop file" (a shim serving job after job)
        self.request_signals = STOP_SIGNALS - {signal.SIGUSR1} if pokes_only else STOP_SIGNALS
        self.spec: LaunchSpec | None = None
        self.pid: int | None = None  # the workload's, which is also its process group's id
        self.started_at: str | None = None
        self.stop: StopRecord | None = None
        self._kill_deadline: float | None = None  # monotonic
        self._last_request: StopRequest | None = None
        self.limits: Enforcer | None = None  # the job's cores and memory, if it has limits

    def run(self, spec: dict[str, Any] | None) -> ExitStatus:
        """The job's whole life; spec None: read it from spec.json."""
        try:
            self.spec = LaunchSpec.from_dict(spec or self._spec_file())
            self.limits = _enforcer(self.spec, self.state_dir)
        except ValueError as exc:
            return self._finished(error=str(exc))
        self._take_stop_request(self.wakeups.take())
        if self.stop is not None:  # not started at all: the job ends stopped, never run
            return self._finished(error="stopped before the workload started")
        try:
            self.pid = self._spawn_limited()
        except (OSError, ValueError, TypeError) as exc:  # a NUL byte raises ValueError
            if self.limits is not None:
                self.limits.remove_cgroup()
            return self._spawn_failed(exc)
        self.started_at = utc_now()
        if self.on_started is not None:
            self.on_started()  # first: the agent waits for it, and needs nothing below
        # One record, once the workload runs: until then the held lock alone says we live.
        self._write_record()
        self._supervise()
        return self._finished(returncode=self._end_job())

    def _spawn_limited(self) -> int:
        assert self.spec is not None
        if self.limits is None:
            return _spawn(self.spec, self.state_dir)
        with self.limits.spawning():  # what the workload inherits from its start
            return _spawn(self.spec, self.state_dir)

    def _spec_file(self) -> dict[str, Any]:
        path = f"{self.state_dir}/{SPEC_FILE}"
        data = read_json(path)
        if data is None:
            raise ValueError(f"no launch spec at {path}")
        return data

    def _write_record(self) -> None:
        spec, shim = self.spec, own_identity()
        assert spec is not None and shim is not None and self.pid is not None
        record = ShimRecord(
            shim=shim,
            workload=ProcessIdentity.of(self.pid),
            job_id=spec.job_id,
            attempt=spec.attempt,
            grace_s=spec.grace_s,
            state_dir=self.state_dir,
            started_at=self.started_at,
        )
        write_json_atomic(f"{self.state_dir}/{RECORD_FILE}", record.to_dict(), durable=False)

    def _supervise(self) -> None:
        """Until the workload exits: take stop requests, and SIGKILL at a stop's deadline."""
        signals: set[int] = set()
        while not self._workload_exited():
            self._take_stop_request(signals)
            self._kill_if_due()
            assert self.pid is not None
            if self.limits is not None:
                self.limits.watch(self.pid)
            signals = self.wakeups.wait(self._timeout())

    def _timeout(self) -> float:
        interval = None if self.limits is None else self.limits.interval
        poll = min(STOP_FILE_POLL_S, interval or STOP_FILE_POLL_S)
        if self._kill_deadline is None or self.stop is None or self.stop.sigkill_at:
            return poll
        return min(poll, self._kill_deadline - time.monotonic())

    def _workload_exited(self) -> bool:
        """Reap adopted orphans; the workload itself is left a zombie (see _end_job)."""
        while True:
            info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            if info is None:
                return False
            if info.si_pid == self.pid:
                return True
            try:
                os.waitpid(info.si_pid, 0)
            except ChildProcessError:
                pass

    def _take_stop_request(self, signals: Iterable[int]) -> None:
        signals = set(signals)
        for sig in signals & SHRUGGED_SIGNALS:
            log_event(f"{signal_name(sig)} ignored: the job goes on")
        # With a request on file, a signal only says "look now"; without, it is the request.
        data = read_json(f"{self.state_dir}/{STOP_FILE}")
        request = None if data is None else StopRequest.from_dict(data)
        if request is None and (stop_signals := signals & self.request_signals):
            request = StopRequest(signal_name(min(stop_signals)))
        if request is not None and request != self._last_request:
            self._last_request = request
            self._begin_stop(request)

    def _begin_stop(self, request: StopRequest) -> None:
        """SIGTERM now, SIGKILL after the grace; a later request may only bring that closer.

        The grace is counted from just after the SIGTERM went, so the job has at least its
        grace whatever this process was kept from running between the two."""
        assert self.spec is not None
        grace_s = self.spec.grace_s if request.grace_s is None else request.grace_s
        if self.stop is not None and (self._kill_deadline or 0) <= time.monotonic() + grace_s:
            return
        if self.stop is None and self.pid is not None:
            signal_job(self.pid, signal.SIGTERM)
        now, deadline = time.time(), time.monotonic() + grace_s
        kill_at = utc_at(now + grace_s)
        if self.stop is None:
            sigterm_at = utc_at(now)
            requested_at = request.requested_at or sigterm_at
            self.stop = StopRecord(request.reason, grace_s, requested_at, sigterm_at, kill_at)
            log_event(f"stop ({self.stop.reason}): SIGTERM sent, grace {grace_s}s")
        self.stop.grace_s, self.stop.kill_at = grace_s, kill_at
        self._kill_deadline = deadline
        write_json_atomic(f"{self.state_dir}/{STOPPING_FILE}", self.stop.to_dict())

    def _kill_if_due(self) -> None:
        if self.stop is None or self.stop.sigkill_at or self._kill_deadline is None:
            return
        if time.monotonic() >= self._kill_deadline:
            assert self.pid is not None
            signal_job(self.pid, signal.SIGKILL)
            self.stop.sigkill_at = utc_now()
            log_event("grace expired: SIGKILL sent")
            write_json_atomic(f"{self.state_dir}/{STOPPING_FILE}", self.stop.to_dict())

    def _end_job(self) -> int:
        """Kill what is left of the job, reap it all; the workload's returncode.

        The workload is still a zombie here, so its pid, which names the group, cannot have
        been reused: the SIGKILL reaches the job's group and nobody else's.
        """
        assert self.pid is not None
        signal_quietly(os.killpg, self.pid, signal.SIGKILL)
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

    def _spawn_failed(self, exc: Exception) -> ExitStatus:
        assert self.spec is not None
        message = f"jobd: cannot start {self.spec.argv[0]!r}: {_spawn_error(exc, self.spec.cwd)}\n"
        fd = open_append(f"{self.state_dir}/{STDERR_FILE}")
        try:
            os.write(fd, message.encode())
        finally:
            os.close(fd)
        return self._finished(returncode=SPAWN_FAILED_EXIT, error=message.strip())

    def _finished(self, returncode: int | None = None, error: str | None = None) -> ExitStatus:
        started = self.started_at
        workload = None if started is None or self.pid is None else (started, self.pid)
        limits = self.limits if workload is not None else None
        over = None if limits is None else limits.release()
        return ExitStatus.of(returncode, error, workload, self.stop, self.spec, over)


def _enforcer(spec: LaunchSpec, state_dir: str) -> Enforcer | None:
    """The enforcer of spec's limits; None (nothing imported) for a job without."""
    if spec.limits is None:
        return None
    # Imported by the first launch with limits only.
    from jobd.worker.shim.limits import Enforcer, Limits

    return Enforcer(Limits.from_dict(spec.limits), os.path.basename(state_dir))
