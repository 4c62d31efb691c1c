"""The controllers' clocks: the fake one's readings move together, and waits end on them."""

from __future__ import annotations

import time
from datetime import timedelta

import anyio
import pytest

from jobd.controllers.clock import FakeClock, SystemClock

pytestmark = pytest.mark.anyio


def test_advance_moves_wall_and_monotonic_time_together() -> None:
    clock = FakeClock()
    start, mono = clock.now(), clock.monotonic()
    clock.advance(90.5)
    assert clock.now() - start == timedelta(seconds=90.5)
    assert clock.monotonic() - mono == 90.5


async def test_a_fake_sleep_ends_when_advanced_past_and_not_before() -> None:
    clock = FakeClock()
    woke: list[float] = []

    async def sleeper() -> None:
        await clock.sleep(5.0)
        woke.append(clock.monotonic())

    with anyio.fail_after(5):  # a guard against a hang, not a timing
        async with anyio.create_task_group() as tg:
            tg.start_soon(sleeper)
            await anyio.wait_all_tasks_blocked()
            clock.advance(4.75)
            await anyio.wait_all_tasks_blocked()
            assert woke == []
            clock.advance(1.0)
            await anyio.wait_all_tasks_blocked()
            assert woke == [5.75]


async def test_a_deadline_already_passed_ends_the_wait_at_once() -> None:
    for clock in (FakeClock(), SystemClock()):
        with anyio.fail_after(5):
            with clock.move_on_at(clock.monotonic() - 1) as scope:
                await anyio.sleep_forever()
        assert scope.cancelled_caught


async def test_a_system_sleep_lasts_at_least_its_seconds_of_monotonic_time() -> None:
    clock = SystemClock()
    start = time.monotonic()
    await clock.sleep(0.01)
    assert clock.monotonic() - start >= 0.01
