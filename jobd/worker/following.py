"""The agent follows a job's output files: ships them, caps them, scans for the sentinel.

Each chunk of stdout shipped is also handed to `on_stdout` (the job's progress lines are
read there, worker/progress.py), so the output is read once for both.

The shim writes the workload's stdout and stderr straight to files; the agent reads
them by offset in bounded chunks, so it holds no more than one chunk of any job's output
however much the job writes, and a restarted agent resumes from the offsets its record
kept. The broker keeps one log per job (per member of a multi-host job, which ships
with its `rank`: broker/streams/interleaving.py): chunks of the two files are appended
to it in the order the agent reads them (stdout, then stderr, each round), as two pipes
pumped side by side interleaved them before.

A chunk shipped outlives its request: httpx and its connection pool leave the request,
its body stream and the response in reference cycles, which only the cyclic collector
frees, and `jobd dev` runs it rarely (a young pass per 20,000 allocations, daemon/main.py's
`_tune_gc`), which a job printing 50 MB in 200 chunks never made: the agent held most of
it. A young collection after every `SWEEP_BYTES` shipped keeps that garbage bounded,
however long a line and however much a job prints.

The cap keeps each file's head and newest bytes: once a file outgrows it, the middle is
punched out (fallocate PUNCH_HOLE), so the disk holds head + tail while the offsets of
everything after the hole stay what they were. What was punched before it was shipped is
replaced in the shipped log by one line saying how many bytes were dropped.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import gc
import os
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio

from jobd.logconfig import get_logger
from jobd.wire import calls
from jobd.worker.jobrecord import JobRecord
from jobd.worker.reporting import BrokerLink
from jobd.worker.sentinel import SentinelScanner

__all__ = [
    "CHUNK_BYTES",
    "SWEEP_BYTES",
    "OutputFollower",
    "SentinelWatch",
    "dropped_note",
    "punch_hole",
]

log = get_logger()
CHUNK_BYTES = 256 * 1024
SWEEP_BYTES = 16 * CHUNK_BYTES  # shipped between two collections of the young garbage
_BLOCK = 4096
_FALLOC_FL_KEEP_SIZE = 0x01
_FALLOC_FL_PUNCH_HOLE = 0x02
_STREAMS = ("stdout", "stderr")


def dropped_note(count: int, cap: int) -> bytes:
    return f"\n[jobd: {count} bytes of output dropped here (cap {cap} bytes per file)]\n".encode()


def punch_hole(path: Path, start: int, end: int) -> bool:
    """Free [start, end) of path (block-aligned inward), keeping its size; False if unsupported."""
    start, end = -(-start // _BLOCK) * _BLOCK, end // _BLOCK * _BLOCK
    if end <= start:
        return True
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    mode = _FALLOC_FL_PUNCH_HOLE | _FALLOC_FL_KEEP_SIZE
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        done = libc.fallocate(fd, mode, ctypes.c_longlong(start), ctypes.c_longlong(end - start))
    finally:
        os.close(fd)
    return bool(done == 0)


class OutputFollower:
    """Ships one job's two files to the broker's log from the offsets in its record."""

    def __init__(
        self,
        link: BrokerLink,
        state_dir: Path,
        record: JobRecord,
        save: Callable[[], Awaitable[None]],
        cap: int,
        interval_s: float = 0.1,
        on_stdout: Callable[[bytes], None] | None = None,
        rank: int = 0,
    ) -> None:
        self.link, self.state_dir, self.record, self.save = link, state_dir, record, save
        self.cap, self.interval_s, self.on_stdout = cap, interval_s, on_stdout
        # Which member of a multi-host job this output is (the broker keeps each apart).
        self.rank = rank
        self.finished = anyio.Event()  # the job is over: read to EOF, then stop
        self.caught_up = anyio.Event()  # set each time both files were read to their end
        self.done = anyio.Event()  # finished, and both files shipped to their end
        self._cap_checked_at = {name: 0 for name in _STREAMS}
        self._unswept = 0  # bytes shipped since the young garbage was last collected

    async def run(self) -> None:
        """Follow until the job is finished and both files are shipped to their end."""
        while True:
            over = self.finished.is_set()  # before reading: what it wrote by now is read
            moved = False
            for name in _STREAMS:
                moved |= await self._step(name, final=over)
            if moved:
                await self.save()
                continue
            self.caught_up.set()
            if over:
                self.done.set()
                return
            with anyio.move_on_after(self.interval_s):
                await self.finished.wait()
            self.caught_up = anyio.Event()

    async def _step(self, name: str, final: bool) -> bool:
        """Ship the next chunk of one file (after capping it); whether its offset moved."""
        path = self.state_dir / name
        size = await self._cap(path, name, final)
        offset = getattr(self.record, f"{name}_offset")
        hole = self._hole(name)
        if hole is not None and hole[0] <= offset < hole[1]:
            dropped = hole[1] - offset
            self.record.dropped += dropped
            setattr(self.record, f"{name}_offset", hole[1])
            await self._ship(dropped_note(dropped, self.cap))
            return True
        if size <= offset:
            return False  # nothing new: most rounds of most jobs, and no open or read
        limit = CHUNK_BYTES if hole is None or offset >= hole[1] else hole[0] - offset
        chunk = _read(path, offset, min(CHUNK_BYTES, limit))
        if not chunk:
            return False
        setattr(self.record, f"{name}_offset", offset + len(chunk))
        if name == "stdout" and self.on_stdout is not None:
            self.on_stdout(chunk)
        await self._ship(chunk)
        return True

    async def _ship(self, chunk: bytes) -> None:
        record = self.record
        call = calls.append_logs(record.job_id, record.log_offset, chunk, self.rank)
        held = await self.link.call(call)
        if held is None:
            log.warning("logs_refused", job=record.job_id, bytes=len(chunk))
        # Offsets only grow: what the broker refused is not sent again.
        record.log_offset += len(chunk)
        self._unswept += len(chunk)
        if self._unswept >= SWEEP_BYTES:
            self._unswept = 0
            gc.collect(1)  # the young generations only: well under a millisecond

    def _hole(self, name: str) -> tuple[int, int] | None:
        hole = self.record.holes.get(name)
        return None if hole is None else (hole[0], hole[1])

    async def _cap(self, path: Path, name: str, final: bool) -> int:
        """Punch out the middle of a file past the cap: keep cap/2 of head and of tail.
        The file's size (0 if it is missing)."""
        try:
            size = os.stat(path).st_size
        except FileNotFoundError:
            return 0
        slack = 0 if final else max(self.cap // 8, CHUNK_BYTES)
        if size <= self.cap + slack or size == self._cap_checked_at[name]:
            return size
        self._cap_checked_at[name] = size
        head, tail = self.cap // 2, self.cap - self.cap // 2
        start = -(-head // _BLOCK) * _BLOCK
        end = (size - tail) // _BLOCK * _BLOCK
        if end <= start:
            return size
        old = self._hole(name)
        self.record.holes[name] = [start if old is None else old[0], end]
        await self.save()  # the hole is on record before it exists
        if not await anyio.to_thread.run_sync(punch_hole, path, start, end):
            log.warning("log_cap_unsupported", job=self.record.job_id, path=str(path))
        return size


def _read(path: Path, offset: int, size: int) -> bytes:
    try:
        with open(path, "rb", buffering=0) as f:
            f.seek(offset)
            return f.read(size)
    except FileNotFoundError:
        return b""


class SentinelWatch:
    """Looks for the sentinel in stdout written since the stop began; resumes from there."""

    def __init__(self, path: Path, start: int, interval_s: float = 0.05) -> None:
        self.path, self.offset, self.interval_s = path, start, interval_s
        self.scanner = SentinelScanner()
        self.seen = anyio.Event()

    def scan_once(self) -> bool:
        """Scan what was written since the last look; whether the sentinel was seen."""
        while chunk := _read(self.path, self.offset, 64 * 1024):
            self.offset += len(chunk)
            if self.scanner.feed(chunk):
                self.seen.set()
                return True
        return False

    async def run(self, finished: anyio.Event) -> None:
        """Until seen, or until the job is over and its stdout scanned to the end."""
        while not self.seen.is_set():
            over = finished.is_set()
            if self.scan_once() or over:
                return
            with contextlib.suppress(TimeoutError), anyio.move_on_after(self.interval_s):
                await finished.wait()
