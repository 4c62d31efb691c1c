"""`job logs -f` on a terminal: the job's progress on the line under its output.

Drawn on stderr, and only when stderr is a terminal (never into a pipe or a file), so
the output itself stays exactly what the job printed. The line is taken away before each
chunk of output is written and drawn again after it, only where a line of output ended
(a partial line would otherwise be erased with it). The job is read again at most once a
second however much it prints.
"""

from __future__ import annotations

import shutil
import sys
import time
from typing import TextIO

from jobd.cli import render
from jobd.cli.broker_client import JobdClient
from jobd.wire.errors import ApiError, BrokerUnreachable

__all__ = ["ProgressFooter", "footer_for"]

_REFRESH_S = 1.0
_ERASE_LINE = "\r\x1b[2K"


def footer_for(broker: JobdClient, job_id: int, follow: bool) -> ProgressFooter | None:
    """A footer for a followed job when stderr is a terminal; else None."""
    return ProgressFooter(broker, job_id, sys.stderr) if follow and sys.stderr.isatty() else None


class ProgressFooter:
    """One line of progress kept below a stream of output on the same terminal."""

    def __init__(self, broker: JobdClient, job_id: int, stream: TextIO) -> None:
        self.broker, self.job_id, self.stream = broker, job_id, stream
        self._text, self._read_at, self._shown = "", float("-inf"), False

    def clear(self) -> None:
        if self._shown:
            self.stream.write(_ERASE_LINE)
            self.stream.flush()
            self._shown = False

    def draw(self, at_line_start: bool) -> None:
        """Show the newest progress (read anew if a second has passed) where a line ended."""
        now = time.monotonic()
        if now - self._read_at >= _REFRESH_S:
            self._read_at = now
            try:
                self._text = render.progress_line(self.broker.get_job(self.job_id))
            except (ApiError, BrokerUnreachable):
                self._text = ""  # the output goes on; the footer is a courtesy
        self.clear()
        if self._text and at_line_start:
            width = shutil.get_terminal_size().columns - 1  # a wrapped line would stay behind
            self.stream.write(self._text[:width])
            self.stream.flush()
            self._shown = True
