"""Read a job's `jobd-progress` lines as its stdout is shipped, and send the newest on.

The follower (following.py) already reads every byte of stdout once, to ship it; it hands
each chunk to a `ProgressScanner` too, so progress costs nothing while a job prints nothing
and one substring search per chunk while it prints other things. Lines straddle chunks,
so the scanner carries the unfinished last line (at most `MAX_LINE_BYTES`; a longer line
is no progress line, and is skipped to its end).

A chatty job must not flood the broker: the `ProgressSender` keeps only the newest sample
and sends at most one per `PROGRESS_INTERVAL_S`; the newest one not yet sent when the job
ends goes with its `complete` report (Execution._report_end).
"""

from __future__ import annotations

import anyio

from jobd.api.progress import MARKER, MAX_LINE_BYTES, Sample, parse_line
from jobd.worker.reporting import BrokerLink

__all__ = ["PROGRESS_INTERVAL_S", "ProgressScanner", "ProgressSender"]

PROGRESS_INTERVAL_S = 1.0
_MARKER = MARKER.encode("ascii")


class ProgressScanner:
    """Finds the newest readable progress line in a stream fed chunk by chunk."""

    def __init__(self) -> None:
        self._carry = b""  # the unfinished last line
        self._skipping = False  # inside a line too long to be a progress line

    def feed(self, chunk: bytes) -> Sample | None:
        """The newest sample of the lines this chunk finishes; None when none says one."""
        end = chunk.rfind(b"\n")
        if end < 0:
            self._hold(chunk)
            return None
        lines = self._carry + chunk[:end]
        skip_first, self._skipping, self._carry = self._skipping, False, b""
        self._hold(chunk[end + 1 :])
        if _MARKER not in lines:
            return None
        return _newest(lines.split(b"\n")[1 if skip_first else 0 :])

    def _hold(self, tail: bytes) -> None:
        if self._skipping:
            return
        self._carry += tail
        if len(self._carry) > MAX_LINE_BYTES:
            self._carry, self._skipping = b"", True


def _newest(lines: list[bytes]) -> Sample | None:
    for line in reversed(lines):
        if line.startswith(_MARKER):
            sample = parse_line(line.rstrip(b"\r"))
            if sample is not None:
                return sample
    return None


class ProgressSender:
    """Sends a job's newest sample at most once an interval; keeps what it has not sent."""

    def __init__(
        self, link: BrokerLink, job_id: int, attempt: int, interval_s: float = PROGRESS_INTERVAL_S
    ) -> None:
        self.link, self.job_id, self.attempt, self.interval_s = link, job_id, attempt, interval_s
        self._pending: Sample | None = None
        self._ready = anyio.Event()
        self._closed = anyio.Event()

    def offer(self, sample: Sample) -> None:
        """The newest sample: replaces any not yet sent."""
        self._pending = sample
        self._ready.set()

    def close(self) -> Sample | None:
        """Stop sending; the newest sample not yet sent, for the job's last reports."""
        self._closed.set()
        self._ready.set()
        sample, self._pending = self._pending, None
        return sample

    async def run(self) -> None:
        """Until closed: wait for a sample (no cost meanwhile), send it, rest an interval."""
        while True:
            await self._ready.wait()
            self._ready = anyio.Event()
            sample, self._pending = self._pending, None
            if self._closed.is_set():
                return
            if sample is not None:
                await self.link.report(self.job_id, "progress", self.attempt, **sample)
            with anyio.move_on_after(self.interval_s):
                await self._closed.wait()
