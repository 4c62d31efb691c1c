"""The time this broker saw pass, so no deadline runs out on time it did not observe.

A lease expires, and a Lost job times out, because a worker stayed silent while the
broker was there to hear it. Time the broker was not there for proves nothing: before it
started, while the host slept (suspend), while its event loop stalled. `ObservedTime`
counts wall time since a moment, less those stretches: `elapsed_since(t)` is what the
workers loop (lease expiry) and the lifecycle loop (Lost timeout) measure with.

How a stretch is found: the broker looks at the time at least once a second (`watch`,
and every `elapsed_since`). Two looks further apart than `gap_s`, by the monotonic clock
(a stalled loop) or by the wall clock (a suspended host, whose monotonic clock stands
still on Linux), mark everything between them as unobserved. A wall clock stepped
forward reads as a gap too, which only delays an expiry, never hastens one. Until
`watch` runs (a context used alone, as tests and the bench do) only the start counts.
Next stage: controllers/workers.py and lifecycle.py ask `elapsed_since`.
"""

from __future__ import annotations

from collections import deque
from datetime import datetime

from jobd.controllers.clock import Clock
from jobd.logconfig import get_logger

__all__ = ["ObservedTime"]

log = get_logger()
# Enough for any deadline jobd keeps (leases, the Lost timeout): gaps are rare.
_GAPS_KEPT = 1024


class ObservedTime:
    """Wall time since a moment that this broker observed; see the module docstring."""

    def __init__(self, clock: Clock, gap_s: float) -> None:
        self.clock = clock
        self.gap_s = gap_s
        self.started_at = clock.now()
        self._last: tuple[float, datetime] | None = None  # the last look: monotonic, wall
        self._gaps: deque[tuple[datetime, float]] = deque(maxlen=_GAPS_KEPT)  # (end, length)

    async def watch(self, interval_s: float = 1.0) -> None:
        """Look at the time every `interval_s` for as long as the broker runs."""
        self.look()
        while True:
            await self.clock.sleep(interval_s)
            self.look()

    def look(self) -> None:
        """Record the stretch since the previous look as unobserved if it is a gap."""
        mono, wall = self.clock.monotonic(), self.clock.now()
        if self._last is not None:
            last_mono, last_wall = self._last
            seconds = max(mono - last_mono, (wall - last_wall).total_seconds())
            if seconds > self.gap_s:
                self._gaps.append((wall, seconds))
                log.warning("time_unobserved", seconds=round(seconds, 3), since=last_wall)
        self._last = (mono, wall)

    def elapsed_since(self, moment: datetime) -> float:
        """Seconds of wall time since `moment` that this broker was there to see."""
        if self._last is not None:
            self.look()  # a stall that just ended counts before any deadline is judged
        now = self.clock.now()
        since = max(moment, self.started_at)
        unseen = sum(
            min(length, (end - since).total_seconds()) for end, length in self._gaps if end > since
        )
        return max(0.0, (now - since).total_seconds() - unseen)
