"""An injectable clock, so a five-minute rule is tested in milliseconds.

Two readings: `now()`, the wall time that is stored on resources, and `monotonic()`, the
seconds the work queue's timers and backoff run on. `move_on_at(deadline)` is the one way
to wait on the monotonic time: a cancel scope that ends its body once the deadline passes.
On the `FakeClock` time passes only by `advance()`, which moves both readings together
and ends the scopes whose deadline it passed, so a test drives every timer by hand;
`suspend()` moves the wall time alone, as a host's sleep does.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import UTC, datetime, timedelta

import anyio

__all__ = ["Clock", "FakeClock", "SystemClock"]


class Clock:
    def now(self) -> datetime:
        raise NotImplementedError

    def monotonic(self) -> float:
        raise NotImplementedError

    def move_on_at(self, deadline: float) -> AbstractContextManager[anyio.CancelScope]:
        """A scope whose body is cancelled (and the cancellation swallowed) at `deadline`."""
        raise NotImplementedError

    async def sleep(self, seconds: float) -> None:
        with self.move_on_at(self.monotonic() + seconds):
            await anyio.sleep_forever()


class SystemClock(Clock):
    def now(self) -> datetime:
        return datetime.now(UTC)

    def monotonic(self) -> float:
        return time.monotonic()

    def move_on_at(self, deadline: float) -> AbstractContextManager[anyio.CancelScope]:
        # Relative, not anyio's absolute deadline: the event loop's time base need not
        # be time.monotonic()'s.
        return anyio.move_on_after(deadline - time.monotonic())


class FakeClock(Clock):
    """A clock tests move by hand."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime(2026, 1, 1, tzinfo=UTC)
        self._monotonic = 0.0
        self._waiting: dict[anyio.CancelScope, float] = {}

    def now(self) -> datetime:
        return self._now

    def monotonic(self) -> float:
        return self._monotonic

    def advance(self, seconds: float) -> None:
        """Move time on, and end every wait whose deadline is now passed."""
        self._now += timedelta(seconds=seconds)
        self._monotonic += seconds
        for scope, deadline in list(self._waiting.items()):
            if deadline <= self._monotonic:
                scope.cancel()

    def suspend(self, seconds: float) -> None:
        """The host slept: wall time moved on, the monotonic clock (Linux's) did not."""
        self._now += timedelta(seconds=seconds)

    @contextmanager
    def move_on_at(self, deadline: float) -> Iterator[anyio.CancelScope]:
        scope = anyio.CancelScope()
        if deadline <= self._monotonic:
            scope.cancel()  # a scope cancelled before it is entered ends at once
        elif deadline < math.inf:
            self._waiting[scope] = deadline
        try:
            with scope:
                yield scope
        finally:
            self._waiting.pop(scope, None)
