"""The reconcile machinery: a keyed work queue, requeue_after timers, resync.

Modelled on client-go's workqueue and controller-runtime's reconcile loop. A reconcile
request carries only a key; the reconciler re-reads current state (level-triggered) and
returns done, `requeue_after`, or raises (retried with per-key exponential backoff).
A key already queued is not queued twice, and a key being processed is never processed
twice at once: if it is added meanwhile it is marked dirty and runs again afterwards.
Next stage: the controllers in this package, each a Reconciler.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

import anyio
import structlog

from jobd.controllers.clock import Clock, SystemClock
from jobd.logconfig import get_logger
from jobd.store.base import Change, StoreUnavailable

__all__ = [
    "DONE",
    "Reconciler",
    "Result",
    "WorkQueue",
    "run_controller",
    "run_resync",
]

log = get_logger()

# Numbers each reconcile pass of this process, as controller-runtime's reconcileID: an
# int, since a uuid4 costs several microseconds and the logs already say which broker.
_reconcile_ids = itertools.count(1)


@dataclass(frozen=True)
class Result:
    """What a reconcile asks for next: nothing, or another look after a delay."""

    requeue_after: float | None = None


DONE = Result()


class Reconciler(Protocol):
    name: str
    resync_s: float  # every key of keys_all() is looked at again this often; 0 = never

    def keys_for(self, change: Change) -> Iterable[str]: ...
    def keys_all(self) -> Iterable[str]: ...
    async def reconcile(self, key: str) -> Result: ...


class WorkQueue:
    """Deduplicating FIFO of keys with delayed adds and per-key failure backoff.

    With `spacing_s`, passes of one key start at least that far apart: a key added when
    none of its passes started within the spacing is handed out at once (an idle queue
    answers without delay), one added sooner when the spacing since its last start is up
    (a burst of adds makes one pass, not one each). For a controller with a few keys
    (the scheduler's one): the start of each key's last pass is kept.

    Timers and backoff run on `clock`'s monotonic time, so on a FakeClock they fire
    when the test advances it, and only then.
    """

    def __init__(
        self,
        base_backoff_s: float = 0.05,
        max_backoff_s: float = 30.0,
        clock: Clock | None = None,
        spacing_s: float = 0.0,
    ) -> None:
        self.clock = clock or SystemClock()
        self.spacing_s = spacing_s
        self._started: dict[str, float] = {}  # key -> its last pass's start (with spacing)
        self._queue: deque[str] = deque()
        self._dirty: set[str] = set()
        self._processing: set[str] = set()
        self._timers: list[tuple[float, int, str]] = []
        self._due: dict[str, float] = {}  # the earliest pending timer of each key
        self._seq = itertools.count()
        self._failures: dict[str, int] = {}
        self._base, self._max = base_backoff_s, max_backoff_s
        self._wakeup = anyio.Event()

    def __len__(self) -> int:
        return len(self._queue)

    def add(self, key: str) -> None:
        if key in self._dirty:
            return
        if self.spacing_s > 0:
            wait = self._started.get(key, -math.inf) + self.spacing_s - self.clock.monotonic()
            if wait > 0:
                self.add_after(key, wait)  # its timer adds it again once the wait is up
                return
        self._dirty.add(key)
        if key not in self._processing:
            self._queue.append(key)
            self._wakeup.set()

    def add_after(self, key: str, delay_s: float) -> None:
        if delay_s <= 0:
            self.add(key)
            return
        due = self.clock.monotonic() + delay_s
        if self._due.get(key, math.inf) <= due:
            return  # an earlier timer for this key will bring it back anyway
        self._due[key] = due
        heapq.heappush(self._timers, (due, next(self._seq), key))
        self._wakeup.set()

    def backoff(self, failures: int) -> float:
        """Seconds to wait after `failures` failures in a row: doubling, capped."""
        return min(self._max, self._base * math.pow(2, failures))

    def add_rate_limited(self, key: str) -> float:
        failures = self._failures.get(key, 0)
        self._failures[key] = failures + 1
        delay = self.backoff(failures)
        self.add_after(key, delay)
        return delay

    def forget(self, key: str) -> None:
        self._failures.pop(key, None)

    def done(self, key: str) -> None:
        self._processing.discard(key)
        if key in self._dirty:
            self._queue.append(key)
            self._wakeup.set()

    def _fire_timers(self) -> float | None:
        """Move due timers into the queue; the time the next one is due, if any."""
        now = self.clock.monotonic()
        while self._timers and self._timers[0][0] <= now:
            due, _, key = heapq.heappop(self._timers)
            if self._due.get(key) == due:  # else superseded by an earlier timer
                del self._due[key]
                self.add(key)
        return self._timers[0][0] if self._timers else None

    async def get(self) -> str:
        while True:
            next_due = self._fire_timers()
            if self._queue:
                key = self._queue.popleft()
                self._dirty.discard(key)
                self._processing.add(key)
                if self.spacing_s > 0:
                    self._started[key] = self.clock.monotonic()
                return key
            self._wakeup = anyio.Event()
            if next_due is None:
                await self._wakeup.wait()
            else:
                with self.clock.move_on_at(next_due):
                    await self._wakeup.wait()


async def run_controller(reconciler: Reconciler, queue: WorkQueue) -> None:
    """Process keys one at a time, forever: the loop every controller runs.

    Every line logged during a pass carries `controller`, `key` and `reconcile_id`. They
    are bound in this task's own context (a task starts with a copy of its parent's), so
    rebinding at each pass costs ~1 µs and leaks into no other task.
    """
    structlog.contextvars.bind_contextvars(controller=reconciler.name)
    while True:
        key = await queue.get()
        structlog.contextvars.bind_contextvars(key=key, reconcile_id=next(_reconcile_ids))
        try:
            result = await reconciler.reconcile(key)
        except StoreUnavailable as exc:
            _deferred(reconciler.name, key, exc, queue)
        except Exception:
            delay = queue.add_rate_limited(key)
            log.exception("reconcile_failed", controller=reconciler.name, key=key, retry_s=delay)
        else:
            queue.forget(key)
            if result.requeue_after is not None:
                queue.add_after(key, result.requeue_after)
        finally:
            queue.done(key)


class _Deferring:
    """When a pass the store could not serve was last logged (monotonic seconds)."""

    said_at = -math.inf
    every_s = 60.0


def _deferred(controller: str, key: str, exc: StoreUnavailable, queue: WorkQueue) -> None:
    """A pass the store could not serve: retried with the key's backoff like any failure,
    and logged at most once a minute, not once a key and a try. The broker says the store
    is away itself (`store_unreachable`, `store_write_failing`, /readyz)."""
    delay = queue.add_rate_limited(key)
    now = queue.clock.monotonic()
    if now - _Deferring.said_at >= _Deferring.every_s:
        _Deferring.said_at = now
        log.warning(
            "reconcile_deferred", controller=controller, key=key, error=str(exc), retry_s=delay
        )


async def _offer_all_keys(reconciler: Reconciler, queue: WorkQueue) -> None:
    """Add every key of `keys_all()`; while listing them fails, log and retry with backoff.

    keys_all() reads the store: a failure there must not end the task group that runs
    every controller (and the broker's other loops) with it.
    """
    failures = 0
    while True:
        try:
            keys = list(reconciler.keys_all())
        except Exception:
            delay = queue.backoff(failures)
            failures += 1
            log.exception("resync_failed", controller=reconciler.name, retry_s=delay)
            await queue.clock.sleep(delay)
        else:
            for key in keys:
                queue.add(key)
            return


async def run_resync(reconciler: Reconciler, queue: WorkQueue) -> None:
    """Offer every key at the start, then again every `resync_s` (if above 0): the first
    listing, and the safety net under the event-driven path."""
    await _offer_all_keys(reconciler, queue)
    while reconciler.resync_s > 0:
        await queue.clock.sleep(reconciler.resync_s)
        await _offer_all_keys(reconciler, queue)
