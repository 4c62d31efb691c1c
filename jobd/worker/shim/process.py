"""The shim process: set up once, then one serve loop, whether started alone or by the agent.

Started alone (`python -m jobd.worker.shim.process STATE_DIR`, the systemd path: the agent
starts it inside the job's scope, having written spec.json), a shim serves that one job
and exits. Started by the agent to serve launches (`... --serve UMASK`: the agent's end
is jobd.worker.shim.client.pool), it reads LaunchRequest lines on its stdin and answers
on its stdout (Started, then Ended: see jobd.worker.shim.protocol), job after job, until
the agent closes its stdin.

Why job after job: an interpreter started per job costs ~10 ms of CPU and ~20 ms of
latency; a shim that has ended a job, killed and reaped everything it left (it is a
child subreaper, so nothing escapes it), says so in its Ended line (`ID end idle`) and
reads the next request, for ~0.3 ms. A shim that moves on is no longer the earlier job's:
a job is alive while its state directory's flock is held and it has no status.json,
whatever process did it. A stop signal to such a shim only says "read your stop file",
so a late one never stops the next job. When the agent dies, an idle shim reads EOF and
exits; a busy one finishes its job first.

An agent that dies or restarts takes nothing of the job with it: the next one re-adopts
the job from its state directory (jobd.worker.shim.client).

Standard library only, and nothing of jobd's outside jobd.worker.shim: a shim starts
fast, and must not depend on whatever the agent's environment holds.
"""

from __future__ import annotations

import os
import select
import sys

from jobd.worker.shim.lifecycle import own_identity, run_job
from jobd.worker.shim.log import log_event
from jobd.worker.shim.procfs import start_time
from jobd.worker.shim.protocol import (
    LOG_FILE,
    SERVE_FLAG,
    SHIM_MODULE,
    Ended,
    LaunchRequest,
    Started,
)
from jobd.worker.shim.signals import Wakeups, become_subreaper, no_children_left
from jobd.worker.shim.statedir import open_append

# typing.TYPE_CHECKING without importing typing, which would cost every shim 0.4 MiB.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["AgentLink", "Launch", "main", "parse_launch", "serve"]

EXIT_USAGE = 2
EXIT_FAILED = 1
_CHUNK = 65536
# The shared log is set aside (one generation kept) once it outgrows this.
LOG_ROTATE_BYTES = 16 * 1024 * 1024


class Launch:
    """One job for a shim to serve."""

    __slots__ = ("request_id", "spec", "state_dir")

    def __init__(
        self,
        state_dir: str,
        spec: dict[str, Any] | None = None,  # as sent; None: in the directory's spec.json
        request_id: int | None = None,  # the agent's request, to answer; None: started alone
    ) -> None:
        self.state_dir, self.spec, self.request_id = state_dir, spec, request_id


def parse_launch(line: bytes) -> Launch | None:
    """The launch a request asks for, or None (logged) if the line is not one."""
    try:
        request_id, state_dir, spec = LaunchRequest.decode_head(line)
    except (ValueError, KeyError, TypeError) as exc:
        log_event(f"launch failed: {type(exc).__name__}: {exc}")
        return None
    return Launch(state_dir, spec, request_id)


def set_up() -> Wakeups:
    """What every shim does first, however started (in a session of its own already: a
    signal to the agent's group, or its death, stops there)."""
    wakeups = Wakeups()  # a stop signal must never find the default action
    os.chdir("/")  # keep no directory of the agent's busy
    become_subreaper()
    return wakeups


def serve(first: Launch | None, link: AgentLink | None = None) -> int:
    """Serve first (None: the first request), then each launch sent, until the agent
    closes our stdin.

    The process's exit code: that of the last job's run (started alone, 3 says the
    directory had a live shim or a finished job already).
    """
    wakeups = set_up()
    launch, code = first, 0
    if launch is None and link is not None:
        launch = link.next_launch(wakeups)
    while launch is not None:
        reply = _Reply(None if link is None else link.replies, launch.request_id)
        code, reusable = _serve_launch(launch, wakeups, reply, link)
        idle = reusable and link is not None
        reply.end(idle)  # the end and, in one line, that we wait for the next request
        launch = link.next_launch(wakeups) if idle and link is not None else None
    return code


def _serve_launch(
    launch: Launch, wakeups: Wakeups, reply: _Reply, link: AgentLink | None
) -> tuple[int, bool]:
    """One launch: its run's exit code, and whether this process may serve another."""
    try:
        if link is not None:
            if not _mark_launch(launch.state_dir):  # launched before: never a second copy
                reply.send(pid=0)
                return 0, True
            link.own_stdio(os.path.dirname(launch.state_dir))
            wakeups.take()  # stale: a late poke or child's end of an earlier job
        code = run_job(launch.state_dir, wakeups, launch.spec, reply.send, link is not None)
    except Exception as exc:
        log_event(f"launch failed: {type(exc).__name__}: {exc}")
        return EXIT_FAILED, False
    finally:
        reply.send()  # no-op if sent; else the agent learns of the end at once
    return code, no_children_left()


def _mark_launch(state_dir: str) -> bool:
    """Make the state directory, the mark of a launch; False if it was made before."""
    try:
        try:
            os.mkdir(state_dir, 0o700)
        except FileNotFoundError:  # the first job under this root: not a syscall per job
            os.makedirs(os.path.dirname(state_dir), 0o700, exist_ok=True)
            os.mkdir(state_dir, 0o700)
    except FileExistsError:
        return False
    return True


class AgentLink:
    """A serving shim's pipes to the agent: the requests it is sent, the replies it writes
    (a pipe shared by every shim of the agent: each reply is one write under PIPE_BUF,
    so they never interleave)."""

    def __init__(self, requests: int, replies: int) -> None:
        self.requests, self.replies = requests, replies
        self._pending = b""
        self._log_dir: str | None = None

    def next_launch(self, wakeups: Wakeups) -> Launch | None:
        """The next launch sent, or None once the agent has closed our pipe.

        A signal meanwhile (a late poke for the last job, a stray SIGTERM) is dropped: only
        the agent retires an idle shim, so that a request is never sent to one already on
        its way out.
        """
        wakeups.take()  # the last job's SIGCHLD, most often: not worth a wake-up of its own
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

    def own_stdio(self, log_dir: str) -> None:
        """stdin and stdout on /dev/null, stderr on the shared log (set aside when big)."""
        if log_dir == self._log_dir and os.fstat(2).st_size <= LOG_ROTATE_BYTES:
            return
        self._log_dir = log_dir
        null = os.open(os.devnull, os.O_RDWR)
        path = f"{log_dir}/{LOG_FILE}"
        log = open_append(path)
        if os.fstat(log).st_size > LOG_ROTATE_BYTES:
            try:
                os.replace(path, f"{path}.1")
            except OSError:
                pass
        os.dup2(null, 0)
        os.dup2(null, 1)
        os.dup2(log, 2)
        os.close(null)
        os.close(log)


class _Reply:
    """A shim's answers to one request (nothing for a shim started alone)."""

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

    def end(self, idle: bool) -> None:
        if self.request_id is not None:
            self._write(Ended(self.request_id, idle).encode())

    def _write(self, line: bytes) -> None:
        if self.fd is None:
            return
        try:
            os.write(self.fd, line)
        except OSError:  # EPIPE: the agent is gone, the job goes on
            pass


def _serve_requests(umask: str) -> int:
    """Serve the agent's requests: they come on stdin, replies go to stdout (both moved
    off fds 0 and 1, which a job's log and /dev/null take)."""
    if int(umask) >= 0:
        os.umask(int(umask))  # the workload's, not the agent's (jobd/filemodes.py)
    return serve(None, AgentLink(os.dup(0), os.dup(1)))


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) == 2 and args[0] == SERVE_FLAG:
        return _serve_requests(args[1])
    if len(args) != 1:
        print(f"usage: python -m {SHIM_MODULE} STATE_DIR | {SERVE_FLAG} UMASK", file=sys.stderr)
        return EXIT_USAGE
    return serve(Launch(os.path.realpath(args[0])))


if __name__ == "__main__":
    sys.exit(main())
