"""Once no job has run for its idle time, the agent collects and trims its heap
(`malloc_trim`); never while a job runs, and a job that came and went meanwhile starts
the wait again. The idle time is shortened here by configuration."""

from __future__ import annotations

import anyio
import pytest

from jobd.worker.trimming import IdleTrim, trim

pytestmark = pytest.mark.anyio

IDLE_S = 0.02


async def _after(trimming: IdleTrim, waited_s: float) -> int:
    async with anyio.create_task_group() as tg:
        tg.start_soon(trimming.run)
        trimming.went_idle()
        await anyio.sleep(waited_s)
        tg.cancel_scope.cancel()
    return trimming.trims


async def test_an_agent_idle_past_its_idle_time_trims_once() -> None:
    trimming = IdleTrim(lambda: False, IDLE_S)
    async with anyio.create_task_group() as tg:
        tg.start_soon(trimming.run)
        trimming.went_idle()
        with anyio.fail_after(5):
            while not trimming.trims:
                await anyio.sleep(IDLE_S)
        await anyio.sleep(IDLE_S * 5)
        tg.cancel_scope.cancel()
    assert trimming.trims == 1


async def test_an_agent_running_a_job_does_not_trim() -> None:
    assert await _after(IdleTrim(lambda: True, IDLE_S), IDLE_S * 10) == 0


async def test_a_job_that_came_and_went_meanwhile_starts_the_wait_again() -> None:
    trimming = IdleTrim(lambda: False, IDLE_S * 5)
    async with anyio.create_task_group() as tg:
        tg.start_soon(trimming.run)
        trimming.went_idle()
        await anyio.sleep(IDLE_S)
        trimming.went_idle()  # another job ended before the wait was over
        await anyio.sleep(IDLE_S * 4.5)
        assert trimming.trims == 0  # the first wait was over, but a job ended within it
        with anyio.fail_after(5):
            while not trimming.trims:
                await anyio.sleep(IDLE_S)
        tg.cancel_scope.cancel()
    assert trimming.trims == 1


def test_glibc_trims_here() -> None:
    assert trim() is True  # Linux with glibc: the call exists and was made
