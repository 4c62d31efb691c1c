"""How the agent talks to the broker: reports retried until acknowledged, logs, events.

A report (started, stopping, complete, checkpoint-complete) must survive a broker that
is briefly unreachable, so it is retried with backoff until the broker answers; a 4xx
answer is final (the broker decided otherwise, e.g. the job was cancelled meanwhile).
Requests are the wire's calls (`jobd.wire.calls`), sent by its `AsyncClient`; this
module adds the retries and the batching.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

import anyio

from jobd.logconfig import get_logger
from jobd.wire import calls
from jobd.wire.calls import Call
from jobd.wire.client import ApiError, AsyncClient, BrokerUnreachable
from jobd.wire.models import (
    BATCHED_REPORTS,
    BatchedReport,
    ReportBatch,
    WorkerEvent,
    WorkerEvents,
)

__all__ = ["BrokerLink"]

log = get_logger()
_FINAL_STATUSES = range(400, 500)
T = TypeVar("T")


@dataclass
class _Pending:
    """A report waiting for its batch to be answered."""

    item: BatchedReport
    answered: anyio.Event = field(default_factory=anyio.Event)


@dataclass
class BrokerLink:
    client: AsyncClient
    worker: str
    _events: list[WorkerEvent] = field(default_factory=list)
    _events_ready: anyio.Event = field(default_factory=anyio.Event)
    _reports: list[_Pending] = field(default_factory=list)
    _in_flight: anyio.Event | None = None  # set when the batch being sent is answered

    async def call(self, call: Call[T]) -> T | None:
        """Send until the broker answers; None when it refused (4xx) for good."""
        delay = 0.05
        path = call.url
        while True:
            try:
                return await self.client.run(call)
            except BrokerUnreachable as exc:
                log.warning("broker_unreachable", path=path, error=exc.message, retry_s=delay)
            except ApiError as exc:
                if exc.status in _FINAL_STATUSES:
                    log.warning("report_refused", path=path, status=exc.status, detail=exc.message)
                    return None
                log.warning("broker_error", path=path, status=exc.status, retry_s=delay)
            await anyio.sleep(delay)
            delay = min(delay * 2, 2.0)

    async def report(self, job_id: int, verb: str, attempt: int | None = None, **body: Any) -> None:
        """Returns once the broker has acknowledged the report, or refused it for good.

        Reports travel in batches without waiting for company: the first reporter to
        find no request in flight sends everything pending (and the queued events) in
        one, in its own task; reports made meanwhile go in the next. A busy worker's
        `started` and `complete` often share a request.
        """
        await self.report_many(job_id, [(verb, body)], attempt)

    async def report_many(
        self,
        job_id: int,
        reports: list[tuple[str, dict[str, Any]]],
        attempt: int | None = None,
    ) -> None:
        """Several reports on one job, in this order, in one request when none is in flight."""
        pendings = [_Pending(_batched(job_id, verb, body, attempt)) for verb, body in reports]
        self._reports.extend(pendings)
        while not all(p.answered.is_set() for p in pendings):
            if self._in_flight is not None:
                await self._in_flight.wait()  # then ours may be answered, or ours to send
            else:
                await self._send_pending()

    async def _send_pending(self) -> None:
        self._in_flight = anyio.Event()
        batch, self._reports = self._reports, []
        events, self._events = self._events, []  # they ride along
        sent = False
        try:
            await self._send_batch(batch, events)
            sent = True
        finally:
            if not sent:  # cancelled: whoever reports next sends these too
                self._events = events + self._events
            self._reports = [p for p in batch if not p.answered.is_set()] + self._reports
            self._in_flight.set()
            self._in_flight = None

    async def _send_batch(self, batch: list[_Pending], events: list[WorkerEvent]) -> None:
        body = ReportBatch(reports=[p.item for p in batch], events=events)
        results = await self.call(calls.send_reports(self.worker, body)) or []
        # Each report is answered on its own; an error of the broker's fails the whole
        # request, which call() sends again until it is answered.
        for pending, result in zip(batch, results, strict=False):
            if result.status >= 300:
                item = pending.item
                log.warning("report_refused", job=item.job, verb=item.verb, detail=result.detail)
            pending.answered.set()
        for pending in batch[len(results) :]:  # the whole request was refused (4xx)
            pending.answered.set()

    def event(self, event: str, job: int | None = None, **fields: Any) -> None:
        """Log locally and queue for the broker's record, tagged with this worker."""
        log.info(event, job=job, worker=self.worker, **fields)
        ts = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        self._events.append(WorkerEvent(event=event, job=job, ts=ts, fields=fields))
        self._events_ready.set()

    async def ship_events_forever(self, interval_s: float = 0.2) -> None:
        while True:
            await self._events_ready.wait()
            self._events_ready = anyio.Event()
            batch, self._events = self._events, []
            if batch:  # else they left with a batch of reports
                await self.call(calls.ingest_events(WorkerEvents(worker=self.worker, events=batch)))
            await anyio.sleep(interval_s)


def _batched(
    job_id: int, verb: str, fields: dict[str, Any], attempt: int | None = None
) -> BatchedReport:
    """One report for a batch, of its verb's own schema; only the fields said travel, with
    the run's attempt (fencing)."""
    if attempt is not None:
        fields = {**fields, "attempt": attempt}
    return BATCHED_REPORTS[verb].model_validate({"job": job_id, "verb": verb, **fields})
