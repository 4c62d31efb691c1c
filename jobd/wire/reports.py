"""A worker's reports to the broker, batched and fenced: the agent's way and the bench's.

Reports travel in batches: the first reporter to find no request in flight sends
everything pending in one, in its own task; reports made meanwhile go in the next. An
idle worker's report goes at once. A busy one's (a batch went less than BUSY_S ago)
first waits `linger_s` for company, as Nagle's algorithm and Kafka's `linger.ms` do: in a
drain the jobs of eight slots end a few milliseconds apart, and each request costs the
agent and the broker far more CPU than each report in it. Only `started`, `progress` and
`complete` linger: `stopping` and `checkpoint-complete` (a preemption under way) go at
once, and take along whatever lingers. Each report carries the run's
attempt (`status.attempt`), so the broker refuses one of another run (fencing). Batches
are numbered from 1; one whose send was cancelled before its answer came may have been
applied, so it is kept whole and sent again first, under its number (the broker answers
a number it applied without applying it again: `delivery`). How a batch is sent is the
caller's `send`: the agent's retries it until the broker answers and
lets its queued events ride along (`jobd.worker.reporting`); the bench's simulated
workers send it as they are.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio

from jobd.wire.answers import ReportResult

__all__ = ["BUSY_S", "LINGER_S", "BatchedReport", "ReportBatcher", "SendBatch", "batched"]

# One report of a batch, as `wire.models.BATCHED_REPORTS[verb]` declares its fields: the
# job, the verb, the verb's own fields said (and the attempt). Plain JSON, so a worker
# loads no pydantic; the broker validates the batch, so whoever makes a report keeps its
# fields within the model's bounds (worker/hooks/ending.wire_completion, api/progress.py).
BatchedReport = dict[str, Any]

# Sends one batch of reports, by its number; each one's result, in order (fewer: the rest
# were refused). The same number always comes with the same reports.
SendBatch = Callable[[int, list[BatchedReport]], Awaitable[list[ReportResult]]]
# A worker that sent a batch less than this long ago is busy: its next batch lingers
# LINGER_S for company (a job's end is then told at most that much later).
BUSY_S = 0.05
LINGER_S = 0.002
_LINGERING_VERBS = frozenset({"started", "progress", "complete"})


@dataclass
class _Pending:
    """A report waiting for its batch to be answered."""

    item: BatchedReport
    answered: anyio.Event = field(default_factory=anyio.Event)


class ReportBatcher:
    """Reports on any job, gathered into batches that `send` sends one at a time."""

    def __init__(self, send: SendBatch, linger_s: float = LINGER_S) -> None:
        self._send = send
        self._linger_s = linger_s  # how long a busy worker's batch waits for company
        self._reports: list[_Pending] = []
        self._in_flight: anyio.Event | None = None  # set when the batch being sent is answered
        self._last_sent = float("-inf")  # anyio.current_time() of the last batch sent
        self._hurry = anyio.Event()  # set: a report that may not linger is pending
        self._number = 0  # of the last batch made
        # A batch sent (perhaps applied) whose answer never came: sent again, whole, first.
        self._sealed: list[_Pending] | None = None

    async def report(self, job_id: int, verb: str, attempt: int | None = None, **body: Any) -> None:
        """Returns once the broker has answered the batch that carried the report."""
        await self.report_many(job_id, [(verb, body)], attempt)

    async def report_many(
        self,
        job_id: int,
        reports: list[tuple[str, dict[str, Any]]],
        attempt: int | None = None,
    ) -> None:
        """Several reports on one job, in this order, in one request when none is in flight."""
        pendings = [_Pending(batched(job_id, verb, body, attempt)) for verb, body in reports]
        self._reports.extend(pendings)
        if any(verb not in _LINGERING_VERBS for verb, _ in reports):
            self._hurry.set()
        while not all(p.answered.is_set() for p in pendings):
            if self._in_flight is not None:
                await self._in_flight.wait()  # then ours may be answered, or ours to send
            else:
                await self._send_pending()

    async def _send_pending(self) -> None:
        self._in_flight = anyio.Event()  # lingering counts as in flight: others wait
        try:
            if self._sealed is None:
                if self._linger_s and anyio.current_time() - self._last_sent < BUSY_S:
                    with anyio.move_on_after(self._linger_s):
                        await self._hurry.wait()  # reports made meanwhile go too
                self._sealed, self._reports = self._reports, []
                self._number += 1
                self._hurry = anyio.Event()
            batch = self._sealed
            self._last_sent = anyio.current_time()
            await self._send(self._number, [p.item for p in batch])
            self._sealed = None
            for pending in batch:  # each answered on its own, or the whole batch refused
                pending.answered.set()
        finally:
            # Cancelled: a sealed batch is sent again by whoever reports next, the rest after.
            waiting = self._reports + (self._sealed or [])
            if any(p.item["verb"] not in _LINGERING_VERBS for p in waiting):
                self._hurry.set()
            self._in_flight.set()
            self._in_flight = None


def batched(
    job_id: int, verb: str, fields: dict[str, Any], attempt: int | None = None
) -> BatchedReport:
    """One report for a batch, of its verb's own schema; only the fields said travel, with
    the run's attempt (fencing)."""
    item = {"job": job_id, "verb": verb, **fields}
    if attempt is not None:
        item["attempt"] = attempt
    return item
