"""Starting shims: one of the job's own (jobd.worker.shim.process under `python -I -S`,
under the containment's command), or one from the agent's pool process (ShimPool)."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import anyio
import anyio.abc
import anyio.to_thread

import jobd
from jobd.filemodes import started_umask
from jobd.worker.shim.client.handle import END_CHECK_S, Shim, adopt
from jobd.worker.shim.containment import Containment
from jobd.worker.shim.procfs import ProcessIdentity
from jobd.worker.shim.protocol import (
    LOG_FILE,
    POOL_MODULE,
    SHIM_MODULE,
    SPEC_FILE,
    Ended,
    LaunchRequest,
    LaunchSpec,
    bootstrap,
    decode_reply,
)
from jobd.worker.shim.statedir import open_append, write_json_atomic

__all__ = ["ShimPool", "launch", "pool_command", "prepare", "shim_command", "start_shim"]

# A waiter whose end is forgotten (the oldest, past this many) looks within END_CHECK_S.
_ENDS_KEPT = 4096
# The directory holding the jobd package, so the shim imports the agent's own jobd.
_JOBD_HOME = str(Path(jobd.__file__).resolve().parent.parent)


async def start_shim(
    pool: ShimPool, containment: Containment, state_dir: Path, spec: LaunchSpec
) -> Shim:
    """A shim for spec, contained as containment says: from the pool, or one of the job's
    own started under the containment's command (a systemd scope, say)."""
    prefix = containment.shim_command_prefix(spec)
    if prefix is None:
        return await pool.launch(state_dir, spec)
    shim = await anyio.to_thread.run_sync(lambda: launch(state_dir, spec, prefix))
    await shim.started()
    return shim


def prepare(state_dir: Path, spec: LaunchSpec) -> Path:
    """Write spec into a fresh state directory; its resolved path.

    Raises FileExistsError if state_dir already holds a launch (one directory per attempt).
    """
    state_dir = state_dir.resolve()
    state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    if (state_dir / SPEC_FILE).exists():
        raise FileExistsError(f"{state_dir} already holds a launch")
    # Read by this boot's shim only: no fsync on the way to a launch.
    write_json_atomic(state_dir / SPEC_FILE, spec.to_dict(), durable=False)
    return state_dir


def launch(state_dir: Path, spec: LaunchSpec, prefix: list[str] | None = None) -> Shim:
    """Start a shim of its own for spec in a fresh state directory, in a session of its own.

    `prefix` wraps the shim's command (`systemd-run --user --scope ...`, so the scope holds
    the shim and the whole job). Raises FileExistsError as prepare() does.
    """
    state_dir = prepare(state_dir, spec)
    log = open_append(state_dir.parent / LOG_FILE)
    try:
        child = subprocess.Popen(
            [*(prefix or []), *shim_command(SHIM_MODULE, str(state_dir))],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=log,
            cwd="/",
            env=_shim_env(),
            start_new_session=True,  # a signal to the agent's group, or its death, stops here
            umask=started_umask(),  # the workload's, not the daemon's (jobd/filemodes.py)
        )
    finally:
        os.close(log)
    return Shim(state_dir, child=child)


class ShimPool:
    """The agent's end of the pool process (jobd.worker.shim.pool).

    The pool hands each launch to an idle shim, else forks one (~1 ms where starting an
    interpreter per job costs ~30 ms of CPU). Launches are pipelined: each request carries
    an id, and each shim answers for itself, tagged with the id, once its workload runs,
    and again (Ended) once the job is over: a pooled shim lives on after its job, so its
    exit cannot mark the end. The pool dies with the agent (it reads the agent's pipe to
    EOF); the shims, each in a session of its own, go on.
    """

    def __init__(self) -> None:
        self._process: anyio.abc.Process | None = None
        self._send_lock = anyio.Lock()
        self._start_lock = anyio.Lock()
        self._read_lock = anyio.Lock()
        self._next_id = 0
        self._replies = b""
        self._answers: dict[int, tuple[int, int]] = {}  # request id -> (pid, start time)
        self._ended: set[int] = set()  # request ids whose job is over
        self._news = anyio.Event()  # set (and replaced) after each read of answers

    async def launch(self, state_dir: Path, spec: LaunchSpec) -> Shim:
        """A shim for spec in state_dir, returned once the workload runs or the shim is
        over (its status says which).

        Raises FileExistsError if state_dir holds a launch whose shim is gone.
        """
        state_dir = state_dir.absolute()
        self._next_id += 1
        request_id = self._next_id
        request = LaunchRequest(request_id, str(state_dir), spec)
        process, (pid, start_time) = await self._ask(request_id, request.encode())
        if pid == 0:  # launched before (by an agent that died since): never a second copy
            adopted = adopt(state_dir)
            if adopted is None:
                raise FileExistsError(f"{state_dir} holds a launch whose supervisor is gone")
            return adopted
        ended = functools.partial(self._wait_end, process, request_id)
        return Shim(state_dir, identity=ProcessIdentity(pid, start_time), ended=ended)

    async def _ask(
        self, request_id: int, request: bytes
    ) -> tuple[anyio.abc.Process, tuple[int, int]]:
        try:
            process = await self._started()
            assert process.stdin is not None
            async with self._send_lock:
                await process.stdin.send(request)
            await self._read_until(process, lambda: request_id in self._answers)
        except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
            self._lost(process)
            raise RuntimeError("the shim pool died") from exc
        return process, self._answers.pop(request_id)

    async def _wait_end(self, process: anyio.abc.Process, request_id: int) -> None:
        """Return once the job of request_id is said to be over, or after END_CHECK_S
        anyway (the caller looks at the state directory, which has the last word)."""
        with anyio.move_on_after(END_CHECK_S):
            if self._process is not process:  # that pool is gone: no word will come
                await anyio.sleep(END_CHECK_S)
                return
            try:
                await self._read_until(process, lambda: request_id in self._ended)
            except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
                self._lost(process)
                await anyio.sleep(END_CHECK_S)
        self._ended.discard(request_id)

    async def _read_until(self, process: anyio.abc.Process, done: Callable[[], bool]) -> None:
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
                        await self._read_answers(process)
                finally:
                    self._news.set()
                    self._news = anyio.Event()

    async def _read_answers(self, process: anyio.abc.Process) -> None:
        assert process.stdout is not None
        self._replies += await process.stdout.receive()
        *lines, self._replies = self._replies.split(b"\n")
        for line in lines:
            reply = decode_reply(line)
            if isinstance(reply, Ended):
                self._remember_end(reply.id)
            else:
                self._answers[reply.id] = (reply.pid, reply.start_time)

    def _remember_end(self, request_id: int) -> None:
        self._ended.add(request_id)
        if len(self._ended) > _ENDS_KEPT:  # ends nobody waited for (seen in status.json first)
            self._ended = set(sorted(self._ended)[-_ENDS_KEPT // 2 :])

    def _lost(self, process: anyio.abc.Process) -> None:
        if self._process is process:
            self._process = None

    async def start(self) -> None:
        """Start the pool process now, not at the first launch."""
        await self._started()

    async def warm_up(self, scratch: Path) -> None:
        """Start the pool and run one launch of `true` through it in scratch (made afresh,
        removed after). Once this returns the pool has started and imported, and a shim
        whose pages its first launch touched waits idle: the agent's first job costs what
        every other does, not an interpreter's start and a fork."""
        await self.start()
        shutil.rmtree(scratch, ignore_errors=True)  # what a killed agent left
        scratch.mkdir(mode=0o700, parents=True)
        try:
            spec = LaunchSpec(["true"], "/", {"PATH": os.defpath}, 0.0, None, None)
            shim = await self.launch(scratch / "run", spec)
            await shim.wait()
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    async def _started(self) -> anyio.abc.Process:
        async with self._start_lock:  # launches at once must not start a pool each
            if self._process is None or self._process.returncode is not None:
                self._process = await self._start()
            return self._process

    async def _start(self) -> anyio.abc.Process:
        self._replies = b""
        return await anyio.open_process(
            pool_command(),
            stderr=None,
            cwd="/",
            env=_shim_env(),
            start_new_session=True,  # Ctrl-C to the agent's terminal stops nothing here
            umask=started_umask(),  # the workload's, not the daemon's (jobd/filemodes.py)
        )

    async def aclose(self) -> None:
        """Close the pool's pipe: it exits; the shims it forked run on."""
        if self._process is not None:
            with anyio.CancelScope(shield=True):
                await self._process.aclose()
            self._process = None


def shim_command(module: str, *args: str) -> list[str]:
    """How the pool, or a shim of a job's own, is started: the interpreter with the
    standard library and jobd's own directory only (`-I -S`: no site, no site-packages,
    no PYTHON* variables), running module's main() with args.

    Nothing of the agent's environment runs in a shim (a .pth file, sitecustomize,
    PYTHONSTARTUP), and the interpreter starts on a third of the CPU: 7 ms against 22
    with `site` (measured with an editable install, whose finder loads pathlib and
    importlib.util). `-I` drops PYTHONPATH, so protocol.bootstrap puts jobd's directory
    first itself.
    """
    return [sys.executable, "-I", "-S", "-c", bootstrap(module), _JOBD_HOME, *args]


def pool_command() -> list[str]:
    """The pool's command; a forked shim keeps all it imported, and nothing more."""
    return shim_command(POOL_MODULE)


def _shim_env() -> dict[str, str]:
    # No setting of jobd's, above all no token: the shim needs none of them.
    env = {key: value for key, value in os.environ.items() if not key.startswith("JOBD_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [_JOBD_HOME, env.get("PYTHONPATH")]))
    return env
