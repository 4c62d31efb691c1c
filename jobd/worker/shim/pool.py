"""The pool process: shims that serve job after job, fed by the agent's launch requests.

The agent (jobd.worker.shim.client.ShimPool) runs `python -m jobd.worker.shim.pool` and
writes LaunchRequest lines to its stdin; every reply (Started, Ended: see
jobd.worker.shim.protocol) comes on its stdout, written by the shim itself (lines under
PIPE_BUF, so they never interleave).

Why a pool: a fork per job cost the tree ~650 copy-on-write page faults a job (the
interpreter's heap, touched again in every child) and half of the worker side's CPU. A
shim that has ended a job, killed and reaped everything it left (it is a child subreaper,
so nothing escapes it), says so on the notes pipe (before its `ID end`, so a launch made on
hearing of the end finds it idle) and waits for the next request on a pipe of its own;
the pool hands a request to an idle shim, else forks a new one (at most POOL_MAX are kept;
past that a shim serves one job and exits).

Idle shims are few: the one most recently idle stays warm (the next job costs no fork),
every other is retired once idle SPARE_IDLE_S — its pipe is closed, it exits. While jobs
keep coming a shim is idle for a few milliseconds between them, so a drain keeps its
shims; a few seconds after it, the agent keeps one. Each shim is a process of ~12 MiB
RSS (2-3 MiB of it its own: the rest is shared with the pool), which a host pays for
nothing while no job comes.

A shim that moves on is no longer the earlier job's: a job is alive while its state
directory's flock is held and it has no status.json, whatever process did it. A stop
signal to a pooled shim only says "read your stop file", so a late one never stops the
next job. When the agent dies the pool reads EOF and exits; idle shims then read EOF too,
and busy ones finish their job first.

Standard library and jobd.worker.shim only, as the shim itself.
"""

from __future__ import annotations

import contextlib
import gc
import os
import select
import signal
import sys
import time
from dataclasses import dataclass

from jobd.worker.shim.log import log_event
from jobd.worker.shim.process import PoolLink, parse_launch, serve, write_all
from jobd.worker.shim.protocol import POOL_MODULE
from jobd.worker.shim.signals import libc

__all__ = ["POOL_MAX", "SPARE_IDLE_S", "WARM", "main", "serve_launches"]

POOL_MAX = 64  # past this a shim serves one job and exits
WARM = 1  # idle shims kept however long they idle: the most recently idle
SPARE_IDLE_S = 3.0  # any other idle shim is retired after this long
_CHUNK = 65536


def serve_launches(requests: int = 0, replies: int = 1) -> int:
    """Hand each launch request read on `requests` to a shim, until EOF."""
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # shims are reaped by the kernel
    libc()  # loaded once here, not in every shim
    # A collection in a forked child would touch (and so copy) much of the heap: the
    # pool's objects are frozen out of its reach.
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
            ready, _, _ = select.select([self.requests, self.notes], [], [], self._next_retire())
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
        """`+PID` (idle, waiting for a request) and `-PID` (gone) from the shims."""
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
            if write_all(self.members[pid].requests, line + b"\n"):
                return
            self._drop(pid)  # died while idle
        self._fork(line)

    def _fork(self, line: bytes) -> None:
        pooled = len(self.members) < POOL_MAX
        read_end, write_end = os.pipe2(os.O_CLOEXEC) if pooled else (-1, -1)
        pid = os.fork()
        if pid == 0:
            self._become_shim(line, read_end, write_end)  # never returns
        if pooled:
            os.close(read_end)
            self.members[pid] = _Member(write_end)

    def _become_shim(self, line: bytes, read_end: int, write_end: int) -> None:
        code = 1
        try:
            # Only the pool may hold a request pipe's write end, else its reader never
            # sees EOF; the notes' read end is the pool's too.
            for fd in [m.requests for m in self.members.values()] + [self.notes, write_end]:
                if fd >= 0:
                    os.close(fd)
            link = PoolLink(os.dup(self.replies), read_end if read_end >= 0 else None, self.notes_w)
            serve(parse_launch(line), link)
            code = 0
        except BaseException as exc:  # a forked child must never unwind into the pool
            log_event(f"shim failed: {type(exc).__name__}: {exc}")
        finally:
            os._exit(code)

    def _drop(self, pid: int) -> None:
        member = self.members.pop(pid)
        os.close(member.requests)
        if pid in self.idle:
            self.idle.remove(pid)

    def _spares(self) -> list[int]:
        """The idle shims past the warm ones, the longest idle first."""
        return self.idle[: max(0, len(self.idle) - WARM)]

    def _next_retire(self) -> float | None:
        """Seconds until the next spare is due to retire; None: no spare (sleep till news)."""
        spares = self._spares()
        if not spares:
            return None
        oldest = min(self.members[p].idle_since or 0.0 for p in spares)
        return max(0.0, oldest + SPARE_IDLE_S - time.monotonic())

    def _retire_idle(self) -> None:
        too_old = time.monotonic() - SPARE_IDLE_S
        for pid in [p for p in self._spares() if (self.members[p].idle_since or 0) <= too_old]:
            self._drop(pid)  # it reads EOF and exits


def main() -> int:
    if sys.argv[1:]:
        print(f"usage: python -m {POOL_MODULE}", file=sys.stderr)
        return 2
    return serve_launches()


if __name__ == "__main__":
    sys.exit(main())
