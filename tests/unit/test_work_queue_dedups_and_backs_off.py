"""The work queue under the controllers: dedup, one-at-a-time per key, timers, backoff."""

from __future__ import annotations

import time
from collections.abc import Iterable

import anyio
import pytest
from structlog.testing import capture_logs

from jobd.controllers.queueing import DONE, Result, WorkQueue, run_controller
from jobd.store.base import Change

pytestmark = pytest.mark.anyio


async def _get(queue: WorkQueue, timeout: float = 1.0) -> str:
    with anyio.fail_after(timeout):
        return await queue.get()


async def test_a_key_added_many_times_is_processed_once() -> None:
    queue = WorkQueue()
    for _ in range(5):
        queue.add("job/1")
    queue.add("job/2")
    assert len(queue) == 2
    assert await _get(queue) == "job/1"
    queue.done("job/1")
    assert await _get(queue) == "job/2"
    queue.done("job/2")
    assert len(queue) == 0


async def test_a_key_added_while_processing_waits_and_then_runs_again() -> None:
    queue = WorkQueue()
    queue.add("k")
    assert await _get(queue) == "k"
    queue.add("k")
    queue.add("k")
    assert len(queue) == 0, "a key being processed must not be handed out again"
    queue.done("k")
    assert len(queue) == 1
    assert await _get(queue) == "k"
    queue.done("k")
    assert len(queue) == 0


class _Recorder:
    """A reconciler that sleeps a little and notes how many runs overlap."""

    name = "recorder"
    resync_s = 0.0

    def __init__(self, fail_times: int = 0, requeue_after: float | None = None) -> None:
        self.runs: list[float] = []
        self.active = 0
        self.max_active = 0
        self.fail_times = fail_times
        self.requeue_after = requeue_after
        self.done = anyio.Event()
        self.target_runs = 1

    def keys_for(self, change: Change) -> Iterable[str]:
        return []

    def keys_all(self) -> Iterable[str]:
        return []

    async def reconcile(self, key: str) -> Result:
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        self.runs.append(time.monotonic())
        try:
            await anyio.sleep(0.01)
            if len(self.runs) <= self.fail_times:
                raise RuntimeError("boom")
        finally:
            self.active -= 1
            if len(self.runs) >= self.target_runs:
                self.done.set()
        if self.requeue_after is not None and len(self.runs) < self.target_runs:
            return Result(requeue_after=self.requeue_after)
        return DONE


async def _run_until_done(reconciler: _Recorder, queue: WorkQueue, timeout: float = 2.0) -> None:
    with anyio.fail_after(timeout):
        async with anyio.create_task_group() as tg:
            tg.start_soon(run_controller, reconciler, queue)
            await reconciler.done.wait()
            await anyio.sleep(0.03)  # room for a wrongful extra run to show up
            tg.cancel_scope.cancel()


class _Gated(_Recorder):
    """Each run waits for the test to open the gate, so overlaps cannot hide in timing."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = anyio.Event()
        self.entered = anyio.Event()

    async def reconcile(self, key: str) -> Result:
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        self.runs.append(time.monotonic())
        self.entered.set()
        try:
            await self.gate.wait()
        finally:
            self.active -= 1
            if len(self.runs) >= self.target_runs:
                self.done.set()
        return DONE


async def test_a_key_is_never_reconciled_twice_at_once() -> None:
    queue = WorkQueue()
    rec = _Gated()
    rec.target_runs = 2
    queue.add("k")
    with anyio.fail_after(2):
        async with anyio.create_task_group() as tg:
            tg.start_soon(run_controller, rec, queue)
            await rec.entered.wait()
            for _ in range(5):
                queue.add("k")
                await anyio.sleep(0)
            assert rec.active == 1 and len(rec.runs) == 1
            rec.gate.set()
            await rec.done.wait()
            await anyio.sleep(0.03)  # room for a wrongful third run to show up
            tg.cancel_scope.cancel()
    assert rec.max_active == 1
    assert len(rec.runs) == 2, "adds during a run collapse into one run afterwards"


async def test_add_after_fires_only_after_the_delay() -> None:
    queue = WorkQueue()
    start = time.monotonic()
    queue.add_after("k", 0.02)
    assert len(queue) == 0
    assert await _get(queue) == "k"
    assert time.monotonic() - start >= 0.02


async def test_add_after_with_no_delay_is_a_plain_add() -> None:
    queue = WorkQueue()
    queue.add_after("k", 0)
    assert len(queue) == 1


async def test_a_due_timer_for_a_queued_key_does_not_queue_it_twice() -> None:
    queue = WorkQueue()
    queue.add("k")
    queue.add_after("k", 0.005)
    await anyio.sleep(0.01)
    assert await _get(queue) == "k"
    queue.done("k")
    with anyio.move_on_after(0.02):
        await queue.get()
        pytest.fail("the timer's add was a duplicate of the queued key")


def test_add_rate_limited_backs_off_exponentially_up_to_the_cap() -> None:
    queue = WorkQueue(base_backoff_s=0.01, max_backoff_s=0.05)
    delays = [queue.add_rate_limited("k") for _ in range(5)]
    assert delays == pytest.approx([0.01, 0.02, 0.04, 0.05, 0.05])
    assert queue.add_rate_limited("other") == pytest.approx(0.01), "backoff is per key"
    queue.forget("k")
    assert queue.add_rate_limited("k") == pytest.approx(0.01)


async def test_run_controller_retries_a_failing_reconciler_with_backoff() -> None:
    queue = WorkQueue(base_backoff_s=0.01, max_backoff_s=1.0)
    rec = _Recorder(fail_times=2)
    rec.target_runs = 3
    queue.add("k")
    with capture_logs() as logs:
        await _run_until_done(rec, queue)
    assert len(rec.runs) == 3
    gaps = [b - a for a, b in zip(rec.runs, rec.runs[1:], strict=False)]
    assert gaps[0] >= 0.01 + 0.01  # run time + first backoff
    assert gaps[1] >= 0.01 + 0.02  # run time + doubled backoff
    failures = [e for e in logs if e["event"] == "reconcile_failed"]
    assert [e["retry_s"] for e in failures] == pytest.approx([0.01, 0.02])
    assert all(e["key"] == "k" and e["controller"] == "recorder" for e in failures)


async def test_run_controller_requeues_after_the_delay_a_reconcile_asks_for() -> None:
    queue = WorkQueue()
    rec = _Recorder(requeue_after=0.02)
    rec.target_runs = 2
    queue.add("k")
    await _run_until_done(rec, queue)
    assert len(rec.runs) == 2
    assert rec.runs[1] - rec.runs[0] >= 0.02
