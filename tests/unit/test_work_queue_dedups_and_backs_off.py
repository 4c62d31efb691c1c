"""The work queue under the controllers: dedup, one-at-a-time per key, timers, backoff.

Every queue here runs on a FakeClock: time passes only when a test advances it, and
`_settle()` lets every task run until all are blocked, so "not yet" and "now" are exact
instants of virtual time rather than real-time sleeps that a loaded machine stretches.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager

import anyio
import pytest
import structlog
from structlog.testing import capture_logs

from jobd.controllers import queueing
from jobd.controllers.clock import FakeClock
from jobd.controllers.queueing import DONE, Result, WorkQueue, run_controller
from jobd.store.base import Change, StoreUnavailable

pytestmark = pytest.mark.anyio

TICK = 2.0**-10  # exact in binary, so due times compare exactly after sums


def _queue(base_backoff_s: float = 1.0, max_backoff_s: float = 30.0) -> WorkQueue:
    return WorkQueue(base_backoff_s, max_backoff_s, clock=FakeClock())


def _advance(queue: WorkQueue, seconds: float) -> None:
    assert isinstance(queue.clock, FakeClock)
    queue.clock.advance(seconds)


async def _settle() -> None:
    """Let every other task run until all of them wait on something."""
    await anyio.wait_all_tasks_blocked()


async def _get(queue: WorkQueue) -> str:
    with anyio.fail_after(1):  # a guard against a hang, not a timing
        return await queue.get()


@asynccontextmanager
async def _consumer(queue: WorkQueue) -> AsyncIterator[list[tuple[str, float]]]:
    """Take every key as it comes, noting the virtual time it came at."""
    got: list[tuple[str, float]] = []

    async def consume() -> None:
        while True:
            key = await queue.get()
            got.append((key, queue.clock.monotonic()))
            queue.done(key)

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(consume)
            await _settle()
            yield got
            tg.cancel_scope.cancel()


async def test_a_key_added_many_times_is_processed_once() -> None:
    queue = _queue()
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
    queue = _queue()
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


async def test_add_after_fires_when_the_clock_reaches_the_delay_and_not_before() -> None:
    queue = _queue()
    async with _consumer(queue) as got:
        queue.add_after("k", 5.0)
        await _settle()
        _advance(queue, 5.0 - TICK)
        await _settle()
        assert got == []
        _advance(queue, TICK)
        await _settle()
        assert got == [("k", 5.0)]
        _advance(queue, 100.0)
        await _settle()
        assert got == [("k", 5.0)], "a timer fires once"


async def test_an_earlier_timer_supersedes_a_later_one() -> None:
    queue = _queue()
    async with _consumer(queue) as got:
        queue.add_after("k", 10.0)
        await _settle()  # the consumer now waits for 10
        queue.add_after("k", 3.0)  # and must wake for 3
        await _settle()
        _advance(queue, 3.0)
        await _settle()
        assert got == [("k", 3.0)]
        _advance(queue, 7.0)
        await _settle()
        assert got == [("k", 3.0)], "the superseded timer must not fire again"


async def test_a_later_timer_does_not_postpone_an_earlier_one() -> None:
    queue = _queue()
    async with _consumer(queue) as got:
        queue.add_after("k", 3.0)
        queue.add_after("k", 10.0)
        _advance(queue, 3.0)
        await _settle()
        _advance(queue, 7.0)
        await _settle()
        assert got == [("k", 3.0)]


async def test_timers_of_different_keys_fire_in_due_order() -> None:
    queue = _queue()
    async with _consumer(queue) as got:
        queue.add_after("late", 2.0)
        queue.add_after("early", 1.0)
        _advance(queue, 1.0)
        await _settle()
        assert got == [("early", 1.0)]
        _advance(queue, 1.0)
        await _settle()
        assert got == [("early", 1.0), ("late", 2.0)]


async def test_add_after_with_no_delay_is_a_plain_add() -> None:
    queue = _queue()
    queue.add_after("k", 0)
    assert len(queue) == 1


async def test_a_due_timer_for_a_queued_key_does_not_queue_it_twice() -> None:
    queue = _queue()
    queue.add("k")
    queue.add_after("k", 1.0)
    _advance(queue, 1.0)
    assert await _get(queue) == "k"
    queue.done("k")
    async with _consumer(queue) as got:
        _advance(queue, 100.0)
        await _settle()
        assert got == [], "the timer's add was a duplicate of the queued key"


async def test_a_spaced_queue_hands_out_a_key_at_once_when_idle() -> None:
    """The scheduler's: a job created on an idle broker waits for no timer."""
    queue = WorkQueue(clock=FakeClock(), spacing_s=0.5)
    async with _consumer(queue) as got:
        queue.add("queue")
        await _settle()
        assert got == [("queue", 0.0)]
        _advance(queue, 0.5)
        queue.add("queue")  # its last pass started a whole spacing ago
        await _settle()
        assert got == [("queue", 0.0), ("queue", 0.5)]


async def test_a_spaced_queue_makes_one_pass_of_a_burst_once_the_spacing_is_up() -> None:
    queue = WorkQueue(clock=FakeClock(), spacing_s=0.5)
    async with _consumer(queue) as got:
        queue.add("queue")
        await _settle()
        for _ in range(3):
            _advance(queue, 0.125)
            queue.add("queue")
            await _settle()
        assert got == [("queue", 0.0)], "within the spacing of the last pass's start"
        _advance(queue, 0.125 - TICK)
        await _settle()
        assert got == [("queue", 0.0)]
        _advance(queue, TICK)
        await _settle()
        assert got == [("queue", 0.0), ("queue", 0.5)], "three adds, one pass"
        queue.add("other")  # spacing is per key
        await _settle()
        assert got[-1] == ("other", 0.5)


def test_add_rate_limited_backs_off_exponentially_up_to_the_cap() -> None:
    queue = _queue(base_backoff_s=0.01, max_backoff_s=0.05)
    delays = [queue.add_rate_limited("k") for _ in range(5)]
    assert delays == pytest.approx([0.01, 0.02, 0.04, 0.05, 0.05])
    assert queue.add_rate_limited("other") == pytest.approx(0.01), "backoff is per key"
    queue.forget("k")
    assert queue.add_rate_limited("k") == pytest.approx(0.01)


class _Recorder:
    """A reconciler that notes the virtual time of each run; fails, then may requeue."""

    name = "recorder"
    resync_s = 0.0

    def __init__(
        self, clock: FakeClock, fail_times: int = 0, requeue_after: float | None = None
    ) -> None:
        self.clock = clock
        self.runs: list[float] = []
        self.fail_times = fail_times
        self.requeue_after = requeue_after

    def keys_for(self, change: Change) -> Iterable[str]:
        return []

    def keys_all(self) -> Iterable[str]:
        return []

    async def reconcile(self, key: str) -> Result:
        self.runs.append(self.clock.monotonic())
        structlog.get_logger().info("looking")
        if len(self.runs) <= self.fail_times:
            raise RuntimeError("boom")
        if self.requeue_after is not None and len(self.runs) == self.fail_times + 1:
            return Result(requeue_after=self.requeue_after)
        return DONE


@asynccontextmanager
async def _controller(queue: WorkQueue, rec: _Recorder) -> AsyncIterator[None]:
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(run_controller, rec, queue)
            await _settle()
            yield
            tg.cancel_scope.cancel()


async def _step_to(queue: WorkQueue, rec: _Recorder, gap: float) -> None:
    """Advance by `gap`: one more run exactly at its end, none a tick before."""
    runs = len(rec.runs)
    _advance(queue, gap - TICK)
    await _settle()
    assert len(rec.runs) == runs, f"ran before its {gap} s were up"
    _advance(queue, TICK)
    await _settle()
    assert len(rec.runs) == runs + 1, f"did not run when its {gap} s were up"


async def test_a_failing_reconcile_is_retried_with_doubling_capped_backoff() -> None:
    queue = _queue(base_backoff_s=1.0, max_backoff_s=4.0)
    assert isinstance(queue.clock, FakeClock)
    rec = _Recorder(queue.clock, fail_times=4)
    queue.add("k")
    with capture_logs() as logs:
        async with _controller(queue, rec):
            assert rec.runs == [0.0]
            for gap in (1.0, 2.0, 4.0, 4.0):
                await _step_to(queue, rec, gap)
            _advance(queue, 1000.0)
            await _settle()
    assert rec.runs == [0.0, 1.0, 3.0, 7.0, 11.0], "a success ends the retries"
    failures = [e for e in logs if e["event"] == "reconcile_failed"]
    assert [e["retry_s"] for e in failures] == [1.0, 2.0, 4.0, 4.0]
    assert all(e["key"] == "k" and e["controller"] == "recorder" for e in failures)


async def test_a_success_resets_the_backoff_of_its_key() -> None:
    queue = _queue(base_backoff_s=1.0)
    assert isinstance(queue.clock, FakeClock)
    rec = _Recorder(queue.clock, fail_times=2)
    queue.add("k")
    async with _controller(queue, rec):
        await _step_to(queue, rec, 1.0)
        await _step_to(queue, rec, 2.0)  # the third run succeeds
        rec.fail_times = 4
        queue.add("k")
        await _settle()
        await _step_to(queue, rec, 1.0)  # the base again, not 4
    assert rec.runs == [0.0, 1.0, 3.0, 3.0, 4.0]


async def test_run_controller_requeues_after_the_delay_a_reconcile_asks_for() -> None:
    queue = _queue()
    assert isinstance(queue.clock, FakeClock)
    rec = _Recorder(queue.clock, requeue_after=30.0)
    queue.add("k")
    async with _controller(queue, rec):
        await _step_to(queue, rec, 30.0)
        _advance(queue, 1000.0)
        await _settle()
    assert rec.runs == [0.0, 30.0]


class _Gated(_Recorder):
    """Each run waits for the test to open the gate, so overlaps cannot hide in timing."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock)
        self.gate = anyio.Event()
        self.active = 0
        self.max_active = 0

    async def reconcile(self, key: str) -> Result:
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        self.runs.append(self.clock.monotonic())
        try:
            await self.gate.wait()
        finally:
            self.active -= 1
        return DONE


async def test_a_key_is_never_reconciled_twice_at_once() -> None:
    queue = _queue()
    assert isinstance(queue.clock, FakeClock)
    rec = _Gated(queue.clock)
    queue.add("k")
    async with _controller(queue, rec):
        for _ in range(5):
            queue.add("k")
            await _settle()
        assert rec.active == 1 and len(rec.runs) == 1
        rec.gate.set()
        await _settle()
    assert rec.max_active == 1
    assert len(rec.runs) == 2, "adds during a run collapse into one run afterwards"


async def test_the_lines_logged_in_one_pass_share_a_reconcile_id_of_their_own() -> None:
    queue = _queue(base_backoff_s=1.0)
    assert isinstance(queue.clock, FakeClock)
    rec = _Recorder(queue.clock, fail_times=1)
    queue.add("k")
    queue.add("j")
    with capture_logs(processors=[structlog.contextvars.merge_contextvars]) as logs:
        async with _controller(queue, rec):
            await _step_to(queue, rec, 1.0)  # k again, after its failure
    lines = [(e["event"], e["key"], e["reconcile_id"]) for e in logs]
    (_, _, k1), _, (_, _, j1), (_, _, k2) = lines
    assert lines == [
        ("looking", "k", k1),
        ("reconcile_failed", "k", k1),
        ("looking", "j", j1),
        ("looking", "k", k2),
    ]
    assert len({k1, j1, k2}) == 3
    assert all(e["controller"] == "recorder" for e in logs)
    assert "reconcile_id" not in structlog.contextvars.get_contextvars(), "bound in its task"


class _StoreAway(_Recorder):
    """Its passes fail as they do while the database is away."""

    async def reconcile(self, key: str) -> Result:
        self.runs.append(self.clock.monotonic())
        raise StoreUnavailable("the store at db could not be reached: Connection refused")


async def test_a_store_away_is_retried_with_backoff_and_logged_once_a_minute(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(queueing._Deferring, "said_at", -math.inf)
    queue = _queue(base_backoff_s=1.0, max_backoff_s=30.0)
    assert isinstance(queue.clock, FakeClock)
    rec = _StoreAway(queue.clock)
    queue.add("a")
    queue.add("b")
    with capture_logs() as logs:
        async with _controller(queue, rec):
            for _ in range(8):  # both keys, retried at 1, 2, 4, 8, 16, 30, 30 s...
                _advance(queue, 30.0)
                await _settle()
    assert len(rec.runs) >= 14, "every key is tried again, with its backoff"
    said = [e["event"] for e in logs if e["event"].startswith("reconcile_")]
    assert said == ["reconcile_deferred"] * 5  # at 0 s, then once a minute up to 240 s
