"""A worker's reports go at once when it is idle, and wait a moment for company when it is
busy (a batch went less than BUSY_S ago): a drain's ends share requests.

The batcher sends through the function it is given; here that function records each
batch and answers every report 200, as the broker does for reports it applies.
"""

from __future__ import annotations

import anyio
import pytest

from jobd.wire.answers import ReportResult
from jobd.wire.reports import BUSY_S, BatchedReport, ReportBatcher

pytestmark = pytest.mark.anyio

LONG = 30.0  # a linger no test may wait out: a report that lingered fails its deadline


class Recorder:
    def __init__(self) -> None:
        self.batches: list[list[tuple[int, str]]] = []
        self.numbers: list[int] = []
        self.stall = False  # the next send never gets its answer (until cancelled)

    async def send(self, number: int, reports: list[BatchedReport]) -> list[ReportResult]:
        self.batches.append([(r["job"], r["verb"]) for r in reports])
        self.numbers.append(number)
        if self.stall:
            self.stall = False
            await anyio.sleep_forever()
        return [ReportResult(job=r["job"], status=200) for r in reports]


async def test_an_idle_workers_report_goes_at_once() -> None:
    sent = Recorder()
    batcher = ReportBatcher(sent.send, linger_s=LONG)
    with anyio.fail_after(5):
        await batcher.report(1, "started")
    assert sent.batches == [[(1, "started")]]


async def test_a_busy_workers_reports_made_while_one_lingers_share_its_request() -> None:
    sent = Recorder()
    batcher = ReportBatcher(sent.send, linger_s=0.2)
    with anyio.fail_after(5):
        await batcher.report(1, "started")  # idle: at once
        async with anyio.create_task_group() as tg:
            tg.start_soon(batcher.report, 2, "started")  # busy: it waits for company
            await anyio.wait_all_tasks_blocked()
            assert len(sent.batches) == 1
            tg.start_soon(batcher.report_many, 3, [("started", {}), ("complete", {})])
            tg.start_soon(batcher.report, 4, "started")
    assert sent.batches == [
        [(1, "started")],
        [(2, "started"), (3, "started"), (3, "complete"), (4, "started")],
    ]


async def test_a_worker_idle_for_busy_s_sends_at_once_again() -> None:
    sent = Recorder()
    batcher = ReportBatcher(sent.send, linger_s=LONG)
    with anyio.fail_after(5):
        await batcher.report(1, "started")
        await anyio.sleep(BUSY_S * 1.5)
        await batcher.report(1, "complete")
    assert sent.batches == [[(1, "started")], [(1, "complete")]]


async def test_a_report_whose_reporter_is_cancelled_while_lingering_goes_with_the_next() -> None:
    sent = Recorder()
    batcher = ReportBatcher(sent.send, linger_s=0.2)
    with anyio.fail_after(5):
        await batcher.report(1, "started")
        with anyio.move_on_after(0.05):
            await batcher.report(2, "started")  # lingering when cancelled: not sent
        assert len(sent.batches) == 1
        await batcher.report(3, "started")
    assert sent.batches == [[(1, "started")], [(2, "started"), (3, "started")]]


async def test_a_stop_under_way_is_told_at_once_and_takes_the_lingering_reports_along() -> None:
    sent = Recorder()
    batcher = ReportBatcher(sent.send, linger_s=LONG)
    with anyio.fail_after(5):
        await batcher.report(1, "started")
        async with anyio.create_task_group() as tg:
            tg.start_soon(batcher.report, 2, "complete")  # busy: it would linger LONG
            await anyio.wait_all_tasks_blocked()
            tg.start_soon(batcher.report, 3, "stopping")
        await batcher.report(3, "checkpoint-complete")
    assert sent.batches == [
        [(1, "started")],
        [(2, "complete"), (3, "stopping")],
        [(3, "checkpoint-complete")],
    ]


async def test_a_batch_cancelled_in_flight_is_sent_again_whole_under_its_number() -> None:
    """A batch that went out may have been applied: a report made meanwhile never joins
    it, so the broker can tell the same batch (its number) when it comes again."""
    sent = Recorder()
    batcher = ReportBatcher(sent.send, linger_s=0)
    with anyio.fail_after(5):
        await batcher.report(1, "started")
        sent.stall = True
        with anyio.move_on_after(0.05):
            await batcher.report(2, "started")  # sent, its answer never comes: cancelled
        await batcher.report(3, "started")
    assert sent.batches == [[(1, "started")], [(2, "started")], [(2, "started")], [(3, "started")]]
    assert sent.numbers == [1, 2, 2, 3]
