"""The shim process: set up once, then one serve loop, whether started alone or by the pool.

Started alone (`python -m jobd.worker.shim.process STATE_DIR`, the systemd path: the agent
starts it inside the job's scope, having written spec.json), a shim serves that one job
and exits. Forked by the pool (jobd.worker.shim.pool), it serves the launch it was forked
for, then, if it is a member of the pool and nothing of the job is left, says it is idle
and serves the next launch sent on its pipe, until the pool closes that pipe.

An agent that dies or restarts takes nothing of the job with it: the next one re-adopts
the job from its state directory (jobd.worker.shim.client).

Standard library only, and nothing of jobd's outside jobd.worker.shim: a shim starts
fast, and must not depend on whatever the agent's environment holds.
"""

from __future__ import annotations

import contextlib
import gc
import os
import select
import signal
import sys
from dataclasses import dataclass
from pathlib import Path

from jobd.worker.shim.lifecycle import own_identity, run_job
from jobd.worker.shim.log import log_event
from jobd.worker.shim.procfs import start_time
from jobd.worker.shim.protocol import LOG_FILE, SHIM_MODULE, Ended, LaunchRequest, Started
from jobd.worker.shim.signals import Wakeups, become_subreaper, no_children_left
from jobd.worker.shim.statedir import open_append

# typing.TYPE_CHECKING without importing typing, which would cost every shim 0.4 MiB.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["Launch", "PoolLink", "main", "parse_launch", "serve", "write_all"]

EXIT_USAGE = 2
EXIT_FAILED = 1
_CHUNK = 65536
# The shared log is set aside (one generation kept) once it outgrows this.
LOG_ROTATE_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class Launch:
    """One job for a shim to serve."""

    state_dir: Path
    spec: dict[str, Any] | None = None  # as sent; None: in the directory's spec.json
    request_id: int | None = None  # the pool's request, to answer; None: started alone


def parse_launch(line: bytes) -> Launch | None:
    """The launch a pool request asks for, or None (logged) if the line is not one."""
    try:
        request_id, state_dir, spec = LaunchRequest.decode_head(line)
    except (ValueError, KeyError, TypeError) as exc:
        log_event(f"launch failed: {type(exc).__name__}: {exc}")
        return None
    return Launch(state_dir, spec, request_id)


def set_up(forked: bool) -> Wakeups:
    """What every shim does first, however started."""
    if forked:
        os.setsid()  # a signal to the agent's group, or its death, stops here
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the pool's SIG_IGN: not ours
    wakeups = Wakeups()  # a stop signal must never find the default action
    os.chdir("/")  # keep no directory of the agent's busy
    become_subreaper()
    return wakeups


def serve(first: Launch | None, link: PoolLink | None = None) -> int:
    """Serve first, then (a pool member) each launch sent, until the pool closes our pipe.

    The process's exit code: that of the last job's run (started alone, 3 says the
    directory had a live shim or a finished job already).
    """
    wakeups = set_up(forked=link is not None)
    if link is not None and link.member:
        gc.enable()  # a long life makes cycles worth collecting; the frozen heap stays out
    launch, code = first, 0
    while launch is not None:
        reply = _Reply(None if link is None else link.replies, launch.request_id)
        code, reusable = _serve_launch(launch, wakeups, reply, link)
        idle = reusable and link is not None and link.note_idle()
        reply.end()  # after the note: a launch made on hearing of the end finds us idle
        launch = link.next_launch(wakeups) if idle and link is not None else None
    if link is not None:
        link.note_gone()
    return code


def _serve_launch(
    launch: Launch, wakeups: Wakeups, reply: _Reply, link: PoolLink | None
) -> tuple[int, bool]:
    """One launch: its run's exit code, and whether this process may serve another."""
    try:
        if link is not None:
            if not _mark_launch(launch.state_dir):  # launched before: never a second copy
                reply.send(pid=0)
                return 0, True
            link.own_stdio(launch.state_dir.parent)
            wakeups.take()  # stale: a late poke or child's end of an earlier job
        pokes_only = link is not None and link.member
        code = run_job(launch.state_dir, wakeups, launch.spec, reply.send, pokes_only)
    except Exception as exc:
        log_event(f"launch failed: {type(exc).__name__}: {exc}")
        return EXIT_FAILED, False
    finally:
        reply.send()  # no-op if sent; else the agent learns of the end at once
    return code, no_children_left()


def _mark_launch(state_dir: Path) -> bool:
    """Make the state directory, the mark of a launch; False if it was made before."""
    try:
        try:
            state_dir.mkdir(mode=0o700)
        except FileNotFoundError:  # the first job under this root: not a syscall per job
            state_dir.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            state_dir.mkdir(mode=0o700)
    except FileExistsError:
        return False
    return True


class PoolLink:
    """A forked shim's pipes: replies to the agent, notes to the pool, and (a member of
    the pool) the requests it is sent."""

    def __init__(self, replies: int, requests: int | None, notes: int) -> None:
        self.replies, self.requests, self.notes = replies, requests, notes
        self.member = requests is not None  # else it serves one job and exits
        self._pending = b""
        self._log_dir: Path | None = None

    def next_launch(self, wakeups: Wakeups) -> Launch | None:
        """The next launch sent, or None once the pool has closed our pipe.

        A signal meanwhile (a late poke for the last job, a stray SIGTERM) is dropped: only
        the pool retires an idle shim, so that a request is never sent to one already on
        its way out.
        """
        assert self.requests is not None
        while b"\n" not in self._pending:
            ready, _, _ = select.select([self.requests, wakeups.fileno()], [], [])
            wakeups.take()
            if self.requests in ready:
                chunk = os.read(self.requests, _CHUNK)
                if not chunk:
                    return None
                self._pending += chunk
        line, _, self._pending = self._pending.partition(b"\n")
        return parse_launch(line)

    def note_idle(self) -> bool:
        return self.member and self._note(f"+{os.getpid()}")

    def note_gone(self) -> None:
        self._note(f"-{os.getpid()}")

    def _note(self, note: str) -> bool:
        try:
            return write_all(self.notes, note.encode() + b"\n")
        except OSError:
            return False

    def own_stdio(self, log_dir: Path) -> None:
        """stdin and stdout on /dev/null, stderr on the shared log (set aside when big)."""
        if log_dir == self._log_dir and os.fstat(2).st_size <= LOG_ROTATE_BYTES:
            return
        self._log_dir = log_dir
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


def write_all(fd: int, data: bytes) -> bool:
    """Write data whole; False if the reader is gone."""
    try:
        while data:
            data = data[os.write(fd, data) :]
    except BrokenPipeError:
        return False
    return True


class _Reply:
    """A shim's answers to one pool request (nothing for a shim started alone)."""

    def __init__(self, fd: int | None, request_id: int | None) -> None:
        self.fd, self.request_id = fd, request_id
        self.pid: int | None = None  # as answered

    def send(self, pid: int | None = None) -> None:
        if self.pid is not None or self.request_id is None:
            return
        if pid is None:
            own = own_identity()
            self.pid, start = os.getpid(), None if own is None else own.start_time
        else:
            self.pid, start = pid, start_time(pid) if pid else 0
        self._write(Started(self.request_id, self.pid, start or 0).encode())

    def end(self) -> None:
        if self.pid and self.request_id is not None:  # never for PID 0: someone else's job
            self._write(Ended(self.request_id).encode())

    def _write(self, line: bytes) -> None:
        if self.fd is None:
            return
        with contextlib.suppress(OSError):  # EPIPE: the agent is gone, the job goes on
            os.write(self.fd, line)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print(f"usage: python -m {SHIM_MODULE} STATE_DIR", file=sys.stderr)
        return EXIT_USAGE
    return serve(Launch(Path(args[0]).resolve()))


if __name__ == "__main__":
    sys.exit(main())
