"""A controller's keys_all() reads the store; when it raises, the resync logs, backs off
and tries again instead of ending the task group every controller runs in.

On a FakeClock: each listing is checked at its instant and a tick before.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager

import anyio
import pytest
from structlog.testing import capture_logs

from jobd.controllers.clock import FakeClock
from jobd.controllers.queueing import DONE, Result, WorkQueue, run_resync
from jobd.store.base import Change

pytestmark = pytest.mark.anyio

TICK = 2.0**-10  # exact in binary, so due times compare exactly after sums


class _FlakyListing:
    """keys_all() raises on the calls numbered in `failing` (from 1), else lists `keys`."""

    name = "flaky"

    def __init__(self, clock: FakeClock, failing: set[int], resync_s: float = 0.0) -> None:
        self.clock, self.failing, self.resync_s = clock, failing, resync_s
        self.calls: list[float] = []
        self.keys = ["a", "b"]

    def keys_for(self, change: Change) -> Iterable[str]:
        return []

    def keys_all(self) -> Iterable[str]:
        self.calls.append(self.clock.monotonic())
        if len(self.calls) in self.failing:
            raise OSError("the store is unreachable")
        return self.keys

    async def reconcile(self, key: str) -> Result:
        return DONE


@asynccontextmanager
async def _resyncing(queue: WorkQueue, rec: _FlakyListing) -> AsyncIterator[None]:
    with anyio.fail_after(5):  # a guard against a hang, not a timing
        async with anyio.create_task_group() as tg:
            tg.start_soon(run_resync, rec, queue)
            await anyio.wait_all_tasks_blocked()
            yield
            tg.cancel_scope.cancel()


async def _step_to(clock: FakeClock, rec: _FlakyListing, gap: float) -> None:
    """Advance by `gap`: one more listing exactly at its end, none a tick before."""
    calls = len(rec.calls)
    clock.advance(gap - TICK)
    await anyio.wait_all_tasks_blocked()
    assert len(rec.calls) == calls, f"listed again before its {gap} s were up"
    clock.advance(TICK)
    await anyio.wait_all_tasks_blocked()
    assert len(rec.calls) == calls + 1, f"did not list again when its {gap} s were up"


async def _drain(queue: WorkQueue) -> list[str]:
    """Every key waiting now, taken and done."""
    keys = []
    while len(queue):
        keys.append(await queue.get())
        queue.done(keys[-1])
    return keys


async def test_a_failing_first_listing_is_retried_with_backoff_until_it_lists() -> None:
    clock = FakeClock()
    queue = WorkQueue(base_backoff_s=1.0, max_backoff_s=30.0, clock=clock)
    rec = _FlakyListing(clock, failing={1, 2, 3})
    with capture_logs() as logs:
        async with _resyncing(queue, rec):
            assert rec.calls == [0.0] and len(queue) == 0
            for gap in (1.0, 2.0, 4.0):
                await _step_to(clock, rec, gap)
            assert await _drain(queue) == ["a", "b"]
            clock.advance(1000.0)
            await anyio.wait_all_tasks_blocked()
    assert rec.calls == [0.0, 1.0, 3.0, 7.0], "no resync_s: one listing that succeeds"
    failures = [e for e in logs if e["event"] == "resync_failed"]
    assert [e["retry_s"] for e in failures] == [1.0, 2.0, 4.0]
    assert all(e["controller"] == "flaky" and e["log_level"] == "error" for e in failures)


async def test_a_failing_periodic_resync_backs_off_afresh_and_then_keeps_its_period() -> None:
    clock = FakeClock()
    queue = WorkQueue(base_backoff_s=1.0, max_backoff_s=30.0, clock=clock)
    rec = _FlakyListing(clock, failing={2, 3}, resync_s=60.0)
    async with _resyncing(queue, rec):
        assert await _drain(queue) == ["a", "b"]
        await _step_to(clock, rec, 60.0)  # fails
        await _step_to(clock, rec, 1.0)  # fails
        assert len(queue) == 0
        await _step_to(clock, rec, 2.0)  # lists
        assert await _drain(queue) == ["a", "b"]
        rec.failing = {5}
        await _step_to(clock, rec, 60.0)  # fails again: the backoff starts at the base
        await _step_to(clock, rec, 1.0)
        assert await _drain(queue) == ["a", "b"]
    assert rec.calls == [0.0, 60.0, 61.0, 63.0, 123.0, 124.0]
