"""The launcher: a pool of supervisors, each serving job after job, fed by the agent's requests.

The agent (jobd.worker.supervision.Launcher) runs `python -m jobd.worker.supervisor_pool`
and writes launch requests to its stdin, one JSON line each (id, state_dir, spec); every
answer comes on its stdout, written by the supervisor itself (lines under PIPE_BUF, so they
never interleave):

    ID PID START_TIME   the workload runs under supervisor PID (PID 0: the directory
                        holds a launch already, never a second copy)
    ID end              the job is over: status.json is written and the lock released

Why a pool: a fork per job cost the launcher's tree ~650 copy-on-write page faults a job
(the interpreter's heap, touched again in every child) and half of the worker side's CPU.
A supervisor that has ended a job, killed and reaped everything it left (it is a child
subreaper, so nothing escapes it), says so on the notes pipe (before its `ID end`, so a
launch made on hearing of the end finds it idle) and waits for the next request on a
pipe of its own; the launcher hands a request to an idle supervisor, else
forks a new one (at most POOL_MAX are kept; past that a supervisor serves one job and
exits). One idle longer than IDLE_RETIRE_S is retired: its pipe is closed, it exits.

A supervisor that moves on is no longer the earlier job's: a job is alive while its
state directory's flock is held and it has no status.json, whatever process did it. A
stop signal to a pooled supervisor only says "read your stop file" (supervisor.py), so a
late one never stops the next job. When the agent dies the launcher reads EOF and exits;
idle supervisors then read EOF too, and busy ones finish their job first.

Standard library and jobd.worker.supervisor only, as the supervisor itself.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import select
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from jobd.worker.supervisor import (
    LOG_FILE,
    Wakeups,
    become_subreaper,
    libc,
    log_event,
    no_children_left,
    open_append,
    start_time,
    supervise_one,
)

__all__ = ["IDLE_RETIRE_S", "POOL_MAX", "main", "serve_launches"]

POOL_MAX = 64  # idle supervisors cost ~10 MB each; past this a supervisor serves one job
IDLE_RETIRE_S = 60.0
_RETIRE_CHECK_S = 5.0
_CHUNK = 65536
# The shared log is set aside (one generation kept) once it outgrows this.
LOG_ROTATE_BYTES = 16 * 1024 * 1024


def serve_launches(requests: int = 0, replies: int = 1) -> int:
    """Hand each launch request read on `requests` to a supervisor, until EOF."""
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # supervisors are reaped by the kernel
    libc()  # loaded once here, not in every supervisor
    # A collection in a forked child would touch (and so copy) much of the heap: the
    # launcher's objects are frozen out of its reach.
    gc.disable()
    gc.freeze()
    return _Pool(requests, replies).serve()


@dataclass
class _Member:
    requests: int  # the write end of its request pipe
    idle_since: float | None = None  # monotonic; None while it serves a job


class _Pool:
    def __init__(self, requests: int, replies: int) -> None:
        self.requests, self.replies = requests, replies
        self.notes, self.notes_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        os.set_blocking(self.notes_w, True)
        self.members: dict[int, _Member] = {}
        self.idle: list[int] = []  # the most recently idle last: its pages are warm
        self._notes_pending = b""

    def serve(self) -> int:
        pending = b""
        while True:
            ready, _, _ = select.select([self.requests, self.notes], [], [], _RETIRE_CHECK_S)
            if self.requests in ready:
                chunk = os.read(self.requests, _CHUNK)
                if not chunk:
                    break  # the agent is gone
                *lines, pending = (pending + chunk).split(b"\n")
                for line in filter(None, lines):
                    self._dispatch(line)
            self._take_notes()
            self._retire_idle()
        for member in self.members.values():
            os.close(member.requests)  # idle ones exit now, busy ones after their job
        return 0

    def _take_notes(self) -> None:
        """`+PID` (idle, waiting for a request) and `-PID` (gone) from the supervisors."""
        with contextlib.suppress(BlockingIOError):
            while chunk := os.read(self.notes, _CHUNK):
                self._notes_pending += chunk
        *notes, self._notes_pending = self._notes_pending.split(b"\n")
        for note in notes:
            pid = int(note[1:])
            if pid not in self.members:
                continue  # retired already
            if note.startswith(b"+"):
                self.members[pid].idle_since = time.monotonic()
                self.idle.append(pid)
            else:
                self._drop(pid)

    def _dispatch(self, line: bytes) -> None:
        self._take_notes()
        while self.idle:
            pid = self.idle.pop()
            self.members[pid].idle_since = None
            if _write_all(self.members[pid].requests, line + b"\n"):
                return
            self._drop(pid)  # died while idle
        self._fork(line)

    def _fork(self, line: bytes) -> None:
        pooled = len(self.members) < POOL_MAX
        read_end, write_end = os.pipe2(os.O_CLOEXEC) if pooled else (-1, -1)
        pid = os.fork()
        if pid == 0:
            self._become_supervisor(line, read_end, write_end)  # never returns
        if pooled:
            os.close(read_end)
            self.members[pid] = _Member(write_end)

    def _become_supervisor(self, line: bytes, read_end: int, write_end: int) -> None:
        code = 1
        try:
            # Only the launcher may hold a request pipe's write end, else its reader never
            # sees EOF; the notes' read end is the launcher's too.
            for fd in [m.requests for m in self.members.values()] + [self.notes, write_end]:
                if fd >= 0:
                    os.close(fd)
            pooled = read_end >= 0
            server = _Server(os.dup(self.replies), read_end if pooled else None, self.notes_w)
            server.serve(line)
            code = 0
        except BaseException as exc:  # a forked child must never unwind into the launcher
            log_event(f"supervisor failed: {type(exc).__name__}: {exc}")
        finally:
            os._exit(code)

    def _drop(self, pid: int) -> None:
        member = self.members.pop(pid)
        os.close(member.requests)
        if pid in self.idle:
            self.idle.remove(pid)

    def _retire_idle(self) -> None:
        too_old = time.monotonic() - IDLE_RETIRE_S
        for pid in [p for p in self.idle if (self.members[p].idle_since or 0) < too_old]:
            self._drop(pid)  # it reads EOF and exits


def _write_all(fd: int, data: bytes) -> bool:
    try:
        while data:
            data = data[os.write(fd, data) :]
    except BrokenPipeError:
        return False
    return True


class _Server:
    """One supervisor process: a job, then (pooled) the next one sent, until EOF."""

    def __init__(self, replies: int, requests: int | None, notes: int) -> None:
        self.replies, self.requests, self.notes = replies, requests, notes
        self.pending = b""
        self.log_dir: Path | None = None

    def serve(self, line: bytes) -> None:
        os.setsid()  # a signal to the agent's group, or its death, stops here
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the launcher's SIG_IGN: not ours
        self.wakeups = Wakeups()  # a stop signal must never find the default action
        os.chdir("/")
        become_subreaper()
        if self.requests is not None:
            gc.enable()  # a long life makes cycles worth collecting; the frozen heap stays out
        while line:
            reply = _Reply(self.replies)
            reusable = self._serve_one(line, reply)
            idle = reusable and self.requests is not None and self._note(f"+{os.getpid()}")
            reply.end()  # after the note: a launch made on hearing of the end finds us idle
            if not idle:
                break
            line = self._next_request()
        self._note(f"-{os.getpid()}")

    def _serve_one(self, line: bytes, reply: _Reply) -> bool:
        """One launch request; whether this process may serve another (nothing left over)."""
        try:
            request = json.loads(line)
            reply.request_id = int(request["id"])
            state_dir = Path(request["state_dir"])
            state_dir.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            try:
                state_dir.mkdir(mode=0o700)  # the directory is the mark of a launch
            except FileExistsError:  # launched before: never a second copy
                reply.send(pid=0)
                return True
            self._own_stdio(state_dir.parent)
            self.wakeups.take()  # stale: a late poke or child's end of an earlier job
            pooled = self.requests is not None
            supervise_one(state_dir, self.wakeups, reply.send, request["spec"], pooled)
        except Exception as exc:
            log_event(f"launch failed: {type(exc).__name__}: {exc}")
            return False
        finally:
            reply.send()  # no-op if sent; else the agent learns of the end at once
        return no_children_left()

    def _next_request(self) -> bytes:
        """The next request line, or b"" once the launcher has closed our pipe.

        A signal meanwhile (a late poke for the last job, a stray SIGTERM) is dropped: only
        the launcher retires an idle supervisor, so that a request is never sent to one
        already on its way out.
        """
        assert self.requests is not None
        while b"\n" not in self.pending:
            ready, _, _ = select.select([self.requests, self.wakeups.fileno()], [], [])
            self.wakeups.take()
            if self.requests in ready:
                chunk = os.read(self.requests, _CHUNK)
                if not chunk:
                    return b""
                self.pending += chunk
        line, _, self.pending = self.pending.partition(b"\n")
        return line

    def _note(self, note: str) -> bool:
        try:
            return _write_all(self.notes, note.encode() + b"\n")
        except OSError:
            return False

    def _own_stdio(self, log_dir: Path) -> None:
        """stdin and stdout on /dev/null, stderr on the shared log (set aside when big)."""
        if log_dir == self.log_dir and os.fstat(2).st_size <= LOG_ROTATE_BYTES:
            return
        self.log_dir = log_dir
        null = os.open(os.devnull, os.O_RDWR)
        path = log_dir / LOG_FILE
        log = open_append(path)
        if os.fstat(log).st_size > LOG_ROTATE_BYTES:
            with contextlib.suppress(OSError):
                os.replace(path, path.with_name(LOG_FILE + ".1"))
        os.dup2(null, 0)
        os.dup2(null, 1)
        os.dup2(log, 2)
        os.close(null)
        os.close(log)


class _Reply:
    """A supervisor's answers to one launch request, on the launcher's reply pipe."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.request_id: int | None = None
        self.pid: int | None = None  # as answered

    def send(self, pid: int | None = None) -> None:
        if self.pid is not None or self.request_id is None:
            return
        self.pid = os.getpid() if pid is None else pid
        start = start_time(self.pid) if self.pid else 0
        self._write(f"{self.request_id} {self.pid} {start}\n")

    def end(self) -> None:
        if self.pid:  # never for PID 0: that job is someone else's
            self._write(f"{self.request_id} end\n")

    def _write(self, line: str) -> None:
        with contextlib.suppress(OSError):  # EPIPE: the agent is gone, the job goes on
            os.write(self.fd, line.encode())


def main() -> int:
    if sys.argv[1:]:
        print("usage: python -m jobd.worker.supervisor_pool", file=sys.stderr)
        return 2
    return serve_launches()


if __name__ == "__main__":
    sys.exit(main())
