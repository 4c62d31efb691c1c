"""The bench process's cyclic collector, run as `jobd broker` runs its own.

A scenario that measures in process (placement) or that simulates a fleet in one process
(scale) holds a large heap: under CPython's default thresholds its full collections
stop everything here for tens of milliseconds, work the broker's own collector (frozen
after start-up, young passes every 20,000 allocations: daemon/main.py) does not do, and
a thousand simulated agents stalled at once is not what a fleet of hosts meets. So the
measured phase runs with the broker's settings, and the collector's time is counted.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["Collections", "as_the_broker_collects", "paused"]


class Collections:
    """CPU time the cyclic collector took while counting (gc.callbacks)."""

    def __init__(self) -> None:
        self.counting = True
        self.seconds = 0.0
        self.longest = 0.0  # the longest collection's wall time
        self._began = self._began_wall = 0.0

    def __call__(self, phase: str, _info: dict[str, int]) -> None:
        if phase == "start":
            self._began, self._began_wall = time.process_time(), time.perf_counter()
        elif self.counting:
            self.seconds += time.process_time() - self._began
            self.longest = max(self.longest, time.perf_counter() - self._began_wall)


@contextmanager
def as_the_broker_collects() -> Iterator[Collections]:
    """The collector as `jobd broker` runs it (daemon/main.py _tune_gc), then as it was."""
    thresholds, seen = gc.get_threshold(), Collections()
    gc.collect()
    gc.freeze()
    gc.set_threshold(20_000, 20, 20)
    gc.callbacks.append(seen)
    try:
        yield seen
    finally:
        gc.callbacks.remove(seen)
        gc.set_threshold(*thresholds)
        gc.unfreeze()


@contextmanager
def paused() -> Iterator[None]:
    """No cyclic collection here while measuring (the fleet's garbage waits; refcounting
    still frees the rest), then the collector as it was: what `scale` measures is the
    broker, and even at the broker's settings one collection of a thousand simulated
    agents' heap stalled them all for 195 to 270 ms of wall on a loaded host."""
    gc.collect()
    gc.freeze()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
        gc.unfreeze()
