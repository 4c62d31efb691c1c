"""The agent's shims: started ahead of need, each fed launch after launch on its own pipe.

The agent starts each shim itself (`posix_spawn` of `python -I -S ... --serve UMASK`, in a
session of its own: jobd.worker.shim.process) and writes each LaunchRequest line straight
to an idle shim's stdin; every shim answers on one pipe they all share (Started once its
workload runs, Ended once the job is over: lines under PIPE_BUF, so they never
interleave). No process stands between the agent and its shims: a launch costs one write
and one read on the agent's side, and the shim's own start is paid ahead, off the path.

One shim waits idle from the agent's start (warm_up), so the first job costs what every
other does; when a launch takes the last idle shim, a replacement is started SPARE_AFTER_S
later if none has come back idle by then (by run(): an interpreter starting beside the
launched workload would take the CPU its own start needs), so the next launch finds one
too; one that finds none starts a shim for itself. A shim that ended its job cleanly says
so (`ID end idle`) and is handed the next launch. The one most recently idle stays
(WARM); every other is retired once it and the agent's launches have been idle
SPARE_IDLE_S (its pipe is closed, it reads EOF and exits): a drain keeps its shims, a
few seconds after it the agent keeps one. (The pool process retired a shim idle that
long even while launches came, and forked one again for 1 ms of CPU; a shim started
again costs 10.) At most POOL_MAX shims are kept; past that a shim serves one job and
exits.

The agent holds the only write end of each shim's request pipe: when the agent dies, idle
shims read EOF and exit, busy ones finish their job first, and a restarted agent re-adopts
jobs from their state directories (jobd.worker.shim.client.handle). Shims are the agent's
children, reaped here by pid (never a wait for any child: the agent has others).
"""

from __future__ import annotations

import functools
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import anyio

from jobd.filemodes import started_umask
from jobd.worker.shim.client.handle import END_CHECK_S, Shim, adopt
from jobd.worker.shim.client.starting import shim_command, shim_env
from jobd.worker.shim.procfs import ProcessIdentity
from jobd.worker.shim.protocol import (
    SERVE_FLAG,
    SHIM_MODULE,
    Ended,
    LaunchRequest,
    LaunchSpec,
    decode_reply,
)

__all__ = ["POOL_MAX", "SPARE_AFTER_S", "SPARE_IDLE_S", "WARM", "ShimPool", "serve_command"]

POOL_MAX = 64  # past this a shim serves one job and exits
WARM = 1  # idle shims kept however long they idle: the most recently idle
SPARE_IDLE_S = 3.0  # any other idle shim is retired after this long without a launch
SPARE_AFTER_S = 0.2  # after a launch took the last idle shim, a replacement, if none is idle
# A waiter whose end is forgotten (the oldest, past this many) looks within END_CHECK_S.
_ENDS_KEPT = 4096
_CHUNK = 65536


def serve_command() -> list[str]:
    """A serving shim's command: requests on stdin, replies on stdout."""
    return shim_command(SHIM_MODULE, SERVE_FLAG, str(started_umask()))


class _Member:
    """One shim started by this agent: the write end of its request pipe."""

    __slots__ = ("gone", "idle_since", "kept", "pid", "requests")

    def __init__(self, pid: int, requests: int, kept: bool) -> None:
        self.pid, self.requests, self.kept = pid, requests, kept
        self.idle_since: float | None = time.monotonic()  # None while it serves a job
        self.gone = False  # reaped, or told to go


class ShimPool:
    """The agent's end of its shims: launch, hear of each job's end, keep one warm.

    Launches are pipelined: each request carries an id, and each shim answers for itself,
    tagged with the id, once its workload runs, and again (Ended) once the job is over: a
    shim lives on after its job, so its exit cannot mark the end. Answers are read by
    whichever waiter holds the read lock, for all of them (no task of its own), and
    run() retires spare shims (the agent runs it; without it, spares stay).
    """

    def __init__(self) -> None:
        self._replies_r = self._replies_w = -1  # the shared reply pipe, once opened
        self._members: dict[int, _Member] = {}  # pid -> the shims kept
        self._idle: list[_Member] = []  # the most recently idle last: its pages are warm
        self._leaving: list[_Member] = []  # told to go or serving one job: to reap
        self._serving: dict[int, _Member] = {}  # request id -> the shim it went to
        self._next_id = 0
        self._last_launch = 0.0  # monotonic: when the last launch was sent
        self._replies = b""
        self._answers: dict[int, tuple[int, int]] = {}  # request id -> (pid, start time)
        self._ended: set[int] = set()  # request ids whose job is over
        self._read_lock = anyio.Lock()
        self._news = anyio.Event()  # set (and replaced) after each read of answers
        self._reading: anyio.CancelScope | None = None  # the reader's wait, to cut short
        self._wake = anyio.Event()  # run() has something to look at (spares, a replacement)
        self._replace_at: float | None = None  # monotonic: when run() starts a replacement

    async def launch(self, state_dir: Path, spec: LaunchSpec) -> Shim:
        """A shim for spec in state_dir, returned once the workload runs or the shim is
        over (its status says which).

        Raises FileExistsError if state_dir holds a launch whose shim is gone.
        """
        state_dir = state_dir.absolute()
        self._next_id += 1
        request_id = self._next_id
        request = LaunchRequest(request_id, str(state_dir), spec).encode()
        pid, start_time = await self._ask(request_id, request)
        if pid == 0:  # launched before (by an agent that died since): never a second copy
            adopted = adopt(state_dir)
            if adopted is None:
                raise FileExistsError(f"{state_dir} holds a launch whose supervisor is gone")
            return adopted
        ended = functools.partial(self._wait_end, request_id)
        return Shim(state_dir, identity=ProcessIdentity(pid, start_time), ended=ended)

    async def start(self) -> None:
        """Start an idle shim now, not at the first launch."""
        self._open()
        if not self._idle:
            self._spawn()

    async def warm_up(self, scratch: Path) -> None:
        """Start an idle shim and run one launch of `true` through it in scratch (made
        afresh, removed after). Once this returns a shim that has imported all a launch
        needs, its pages touched, waits idle: the agent's first job costs what every
        other does, not an interpreter's start."""
        await self.start()
        _remove_tree(scratch)  # what a killed agent left
        scratch.mkdir(mode=0o700, parents=True)
        try:
            spec = LaunchSpec(["true"], "/", {"PATH": os.defpath}, 0.0, None, None)
            shim = await self.launch(scratch / "run", spec)
            await shim.wait()
        finally:
            _remove_tree(scratch)

    async def run(self) -> None:
        """Start replacements, retire spare idle shims and reap those gone, until cancelled
        (the agent's task)."""
        while True:
            with anyio.move_on_after(self._next_wake()):
                await self._wake.wait()
            self._wake = anyio.Event()
            self._take_replies()
            self._replace()
            self._retire_idle()
            self._reap()

    async def aclose(self) -> None:
        """Close every shim's pipe: idle ones exit now, busy ones after their job."""
        for member in list(self._members.values()):
            self._drop(member)
        for fd in (self._replies_r, self._replies_w):
            if fd >= 0:
                os.close(fd)
        self._replies_r = self._replies_w = -1
        self._reap()

    # -- launching

    async def _ask(self, request_id: int, request: bytes) -> tuple[int, int]:
        self._open()
        self._take_replies()  # ends nobody read yet: their shims are idle
        member = await self._send(request)
        self._serving[request_id] = member
        await self._read_until(lambda: request_id in self._answers or member.gone)
        answer = self._answers.pop(request_id, None)
        if answer is None:
            self._serving.pop(request_id, None)
            raise RuntimeError(f"shim {member.pid} exited before it answered its launch")
        if not self._idle and self._replace_at is None:
            self._replace_at = time.monotonic() + SPARE_AFTER_S
            self._wake.set()
        return answer

    async def _send(self, request: bytes) -> _Member:
        """Write request to an idle shim (the most recently idle), else to a new one."""
        self._last_launch = time.monotonic()
        while self._idle:
            member = self._idle.pop()
            member.idle_since = None
            if await _write_all(member.requests, request):
                return member
            self._drop(member)  # died while idle
        member = self._spawn(idle=False)
        if not await _write_all(member.requests, request):
            self._drop(member)
            raise RuntimeError(f"shim {member.pid} exited at its start")
        if not member.kept:
            self._drop(member)  # it serves this job, reads EOF and exits
        return member

    def _open(self) -> None:
        if self._replies_r < 0:
            self._replies_r, self._replies_w = os.pipe2(os.O_CLOEXEC)
            os.set_blocking(self._replies_r, False)
            self._replies = b""

    def _spawn(self, idle: bool = True) -> _Member:
        """Start a shim (stdin its request pipe, stdout the shared reply pipe, stderr
        ours until its first job gives it the job's log), in a session of its own."""
        read_end, write_end = os.pipe2(os.O_CLOEXEC)
        try:
            argv = serve_command()
            pid = os.posix_spawn(
                argv[0],
                argv,
                shim_env(),
                file_actions=[
                    (os.POSIX_SPAWN_DUP2, read_end, 0),
                    (os.POSIX_SPAWN_DUP2, self._replies_w, 1),
                ],
                setsid=True,  # Ctrl-C to the agent's terminal, or its death, stops nothing
            )
        except BaseException:
            os.close(write_end)
            raise
        finally:
            os.close(read_end)
        os.set_blocking(write_end, False)
        member = _Member(pid, write_end, kept=len(self._members) < POOL_MAX)
        if member.kept:
            self._members[pid] = member
        if idle and member.kept:
            self._idle.append(member)
        return member

    # -- answers

    async def _wait_end(self, request_id: int) -> None:
        """Return once the job of request_id is said to be over, or after END_CHECK_S
        anyway (the caller looks at the state directory, which has the last word)."""
        with anyio.move_on_after(END_CHECK_S):
            if self._replies_r < 0:  # closed: no word will come
                await anyio.sleep(END_CHECK_S)
                return
            await self._read_until(lambda: request_id in self._ended)
        self._ended.discard(request_id)

    async def _read_until(self, done: Callable[[], bool]) -> None:
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
                        await self._read_answers()
                finally:
                    self._news.set()
                    self._news = anyio.Event()

    async def _read_answers(self) -> None:
        """Wait for answers (at most END_CHECK_S: a shim killed says nothing, so then
        look for shims gone) and take them."""
        if self._replies_r < 0:
            raise RuntimeError("the agent's shims are closed")
        with anyio.move_on_after(END_CHECK_S) as self._reading:
            await anyio.wait_readable(self._replies_r)
        self._reading = None
        if not self._take_replies():
            self._reap()

    def _take_replies(self) -> bool:
        """Every answer in the pipe now, without waiting; whether there was any."""
        lines: list[bytes] = []
        while self._replies_r >= 0:
            try:
                chunk = os.read(self._replies_r, _CHUNK)
            except BlockingIOError:
                break
            *more, self._replies = (self._replies + chunk).split(b"\n")
            lines += more
        for line in lines:
            reply = decode_reply(line)
            if isinstance(reply, Ended):
                self._on_end(reply)
            else:
                self._answers[reply.id] = (reply.pid, reply.start_time)
        if lines and self._reading is not None:
            self._reading.cancel()  # the reader's own answer may be among them
        return bool(lines)

    def _on_end(self, reply: Ended) -> None:
        self._ended.add(reply.id)
        if len(self._ended) > _ENDS_KEPT:  # ends nobody waited for (seen in status.json first)
            self._ended = set(sorted(self._ended)[-_ENDS_KEPT // 2 :])
        member = self._serving.pop(reply.id, None)
        if member is None or member.gone:
            return
        if reply.idle and member.kept:
            member.idle_since = time.monotonic()
            self._idle.append(member)
            if len(self._idle) == WARM + 1:  # the first spare: run() may sleep without end
                self._wake.set()
        else:
            self._drop(member)  # it exits: it left something it must not carry on

    # -- retiring and reaping

    def _drop(self, member: _Member) -> None:
        """Close member's pipe (it exits once idle) and forget it, but to reap it."""
        if member in self._leaving:
            return  # dropped before (a shim serving one job, say, then ending it)
        if member.kept:
            self._members.pop(member.pid, None)
        if member in self._idle:
            self._idle.remove(member)
        if member.requests >= 0:
            os.close(member.requests)
            member.requests = -1
        self._leaving.append(member)

    def _spares(self) -> list[_Member]:
        """The idle shims past the warm ones, the longest idle first."""
        return self._idle[: max(0, len(self._idle) - WARM)]

    def _next_wake(self) -> float | None:
        """Seconds until the next spare is due to retire or a replacement to start
        (sooner while a shim is to be reaped); None: nothing to do until news."""
        now = time.monotonic()
        due = [self._quiet_since(m) + SPARE_IDLE_S - now for m in self._spares()]
        if self._replace_at is not None:
            due.append(self._replace_at - now)
        if self._leaving:
            due.append(END_CHECK_S)
        return max(0.0, min(due)) if due else None

    def _replace(self) -> None:
        """Start the replacement once it is due, if no shim has come back idle."""
        if self._replace_at is None or time.monotonic() < self._replace_at:
            return
        self._replace_at = None
        if not self._idle and self._replies_w >= 0:
            self._spawn()

    def _quiet_since(self, member: _Member) -> float:
        """Since when neither member nor the launches have been busy."""
        return max(member.idle_since or 0.0, self._last_launch)

    def _retire_idle(self) -> None:
        too_old = time.monotonic() - SPARE_IDLE_S
        for member in [m for m in self._spares() if self._quiet_since(m) <= too_old]:
            self._drop(member)  # it reads EOF and exits

    def _reap(self) -> None:
        """Reap the shims that have exited; a kept one found gone is dropped."""
        for member in [*self._members.values(), *self._leaving]:
            try:
                pid, _ = os.waitpid(member.pid, os.WNOHANG)
            except ChildProcessError:
                pid = member.pid
            if pid == 0:
                continue
            if member.kept and member.pid in self._members:
                self._drop(member)
            member.gone = True
            self._leaving.remove(member)
            if self._reading is not None:
                self._reading.cancel()  # a launch waiting on this shim's answer hears of it


async def _write_all(fd: int, data: bytes) -> bool:
    """Write data whole to a non-blocking pipe; False if its reader is gone."""
    try:
        while data:
            try:
                data = data[os.write(fd, data) :]
            except BlockingIOError:
                await anyio.wait_writable(fd)
    except BrokenPipeError:
        return False
    return True


def _remove_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
