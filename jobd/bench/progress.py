"""What the benchmark says on stderr while it runs.

On a terminal: one live rich status line (scenario, phase, done/total). Elsewhere (CI
logs, the test suite): short plain lines, at most one every couple of seconds per
scenario, so a log stays readable.
"""

from __future__ import annotations

import sys
import time
from types import TracebackType
from typing import TextIO

from rich.console import Console
from rich.status import Status

__all__ = ["Progress"]

_PLAIN_EVERY_S = 2.0


class Progress:
    def __init__(self, stream: TextIO | None = None, live: bool | None = None) -> None:
        self.stream = stream or sys.stderr
        self.live = self.stream.isatty() if live is None else live
        self.console = Console(file=self.stream)
        self._status: Status | None = None
        self._scenario = ""
        self._last_plain = 0.0

    def __enter__(self) -> Progress:
        if self.live:
            self._status = self.console.status("jobd bench: starting")
            self._status.start()
        return self

    def __exit__(
        self, _t: type[BaseException] | None, _e: BaseException | None, _tb: TracebackType | None
    ) -> None:
        if self._status is not None:
            self._status.stop()

    def begin(self, scenario: str) -> None:
        self._scenario = scenario
        self._last_plain = time.monotonic()
        self._say(f"{scenario}: starting", force=True)

    def step(self, what: str, done: int | None = None, total: int | None = None) -> None:
        """Report a phase of the current scenario, with a count when there is one."""
        count = f" {done}/{total}" if done is not None and total is not None else ""
        self._say(f"{self._scenario}: {what}{count}")

    def end(self, summary: str) -> None:
        self._say(f"{self._scenario}: {summary}", force=True)

    def _say(self, text: str, force: bool = False) -> None:
        if self._status is not None:
            self._status.update(f"jobd bench: {text}")
            if force:
                self.console.print(f"jobd bench: {text}", highlight=False)
            return
        now = time.monotonic()
        if force or now - self._last_plain >= _PLAIN_EVERY_S:
            self._last_plain = now
            print(f"jobd bench: {text}", file=self.stream, flush=True)
