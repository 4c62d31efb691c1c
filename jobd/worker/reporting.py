"""How the agent talks to the broker: reports retried until acknowledged, logs, events.

A report (started, stopping, complete, checkpoint-complete) must survive a broker that
is briefly unreachable, so it is retried with backoff until the broker answers; a 4xx
answer is final (the broker decided otherwise, e.g. the job was cancelled meanwhile),
but for 426: the broker does not take this agent's protocol version (wire/protocol.py),
which an upgrade of one side ends, so it is retried too, and said at most once a minute.
A request sent again may have been applied already (the broker died after its commit,
before answering, and the next broker takes the retry), so each batch of reports and
each batch of events names its `delivery`: this run of the agent and the request's
number within its kind, the same each time it is sent; the broker applies a delivery
once and answers it again from its receipt after that (broker/routes/workers.py).
Requests are the wire's calls (`jobd.wire.calls`), sent by one of its async clients, reports
batched by its `ReportBatcher` (`jobd.wire.reports`); this module adds the retries and
the events that ride along.
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

import anyio

from jobd.logconfig import get_logger
from jobd.wire import calls
from jobd.wire.answers import ReportResult
from jobd.wire.calls import Call
from jobd.wire.errors import ApiError, BrokerUnreachable
from jobd.wire.protocol import REFUSED_STATUS
from jobd.wire.reports import BatchedReport, ReportBatcher
from jobd.worker.identity import Refused

if TYPE_CHECKING:
    from jobd.wire.plain_async import AsyncSender

__all__ = ["BrokerLink"]

log = get_logger()
_FINAL_STATUSES = range(400, 500)
PROTOCOL_REFUSAL_EVERY_S = 60.0  # a refused protocol is logged at most this often
T = TypeVar("T")


@dataclass
class BrokerLink:
    client: AsyncSender
    worker: str
    # Who sends: this agent's instance id, and the lease's epoch once registered
    # (identity.py). The broker refuses a sender that does not hold the lease.
    instance: str | None = None
    epoch: int | None = None
    _events: list[dict[str, Any]] = field(default_factory=list)
    _events_ready: anyio.Event = field(default_factory=anyio.Event)
    _events_since: float = 0.0  # anyio.current_time() when the oldest queued event came
    _batcher: ReportBatcher = field(init=False)
    clock: Callable[[], float] = time.monotonic  # when a protocol refusal was last said
    _refusal_said_at: float | None = None
    # The rank this worker runs of each multi-host job here (its reports say it); a job
    # of one node has none, and its reports stay as they always were.
    ranks: dict[int, int] = field(default_factory=dict)
    # This run's deliveries: the run, the number of the last events' request, and the
    # batch of reports sent but not yet answered (its number and body, sent again as is).
    run: str = field(default_factory=lambda: uuid.uuid4().hex)
    _events_sent: int = 0
    _unanswered: tuple[int, dict[str, Any]] | None = None

    def __post_init__(self) -> None:
        self._batcher = ReportBatcher(self._send_reports)

    async def call(self, call: Call[T], fenced: bool = False) -> T | None:
        """Send until the broker answers; None when it refused (4xx) for good.

        `fenced`: a 409 means another instance holds the worker's lease; raise Refused
        with the broker's sentence (registration and heartbeat).
        """
        delay = 0.05
        path = call.url
        while True:
            try:
                return await self.client.run(call)
            except BrokerUnreachable as exc:
                log.warning("broker_unreachable", path=path, error=exc.message, retry_s=delay)
            except ApiError as exc:
                if fenced and exc.status == 409:
                    raise Refused(exc.message) from None
                if exc.status == REFUSED_STATUS:
                    self._say_protocol_refused(path, exc.message)
                elif exc.status in _FINAL_STATUSES:
                    log.warning("report_refused", path=path, status=exc.status, detail=exc.message)
                    return None
                else:
                    log.warning("broker_error", path=path, status=exc.status, retry_s=delay)
            await anyio.sleep(delay)
            delay = min(delay * 2, 2.0)

    def _say_protocol_refused(self, path: str, detail: str) -> None:
        """The broker's sentence, once a minute at most: the agent retries meanwhile, and
        a log line per retry would bury everything else."""
        now = self.clock()
        said = self._refusal_said_at
        if said is not None and now - said < PROTOCOL_REFUSAL_EVERY_S:
            return
        self._refusal_said_at = now
        log.error("protocol_refused", path=path, detail=detail, retrying=True)

    def signed(self, body: dict[str, Any]) -> dict[str, Any]:
        """`body` naming this agent's instance and epoch, where known (else they are left
        unset, and the request is as an agent older than fencing by instance sent it)."""
        if self.instance is not None:
            body["instance"] = self.instance
        if self.epoch is not None:
            body["epoch"] = self.epoch
        return body

    async def report(self, job_id: int, verb: str, attempt: int | None = None, **body: Any) -> None:
        """Returns once the broker has acknowledged the report, or refused it for good.

        Reports travel in batches (`jobd.wire.reports`), with the queued events riding
        along; a busy worker's `started` and `complete` often share a request.
        """
        rank = self.ranks.get(job_id)
        if rank is not None:
            body["rank"] = rank
        await self._batcher.report(job_id, verb, attempt, **body)

    async def report_many(
        self,
        job_id: int,
        reports: list[tuple[str, dict[str, Any]]],
        attempt: int | None = None,
    ) -> None:
        """Several reports on one job, in this order, in one request when none is in flight."""
        rank = self.ranks.get(job_id)
        if rank is not None:
            reports = [(verb, {**body, "rank": rank}) for verb, body in reports]
        await self._batcher.report_many(job_id, reports, attempt)

    async def _send_reports(self, number: int, reports: list[BatchedReport]) -> list[ReportResult]:
        """Batch `number`, sent until answered, with the events queued when it was made:
        the same body each time, however often it is sent (or cancelled and sent again)."""
        if self._unanswered is None or self._unanswered[0] != number:
            events, self._events = self._events, []  # they ride along
            delivery = {"run": self.run, "seq": number}
            body = self.signed({"reports": reports, "events": events, "delivery": delivery})
            self._unanswered = (number, body)
        results = await self.call(calls.send_reports(self.worker, self._unanswered[1])) or []
        self._unanswered = None
        # Each report is answered on its own; an error of the broker's fails the whole
        # request, which call() sends again until it is answered.
        for item, result in zip(reports, results, strict=False):
            if result.status >= 300:
                log.warning(
                    "report_refused", job=item["job"], verb=item["verb"], detail=result.detail
                )
        return results

    def event(self, event: str, job: int | None = None, **fields: Any) -> None:
        """Log locally and queue for the broker's record, tagged with this worker."""
        log.info(event, job=job, worker=self.worker, **fields)
        ts = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        if not self._events:
            self._events_since = anyio.current_time()
        said = {key: _json_value(value) for key, value in fields.items()}
        self._events.append({"event": event, "job": job, "ts": ts, "fields": said})
        self._events_ready.set()

    async def ship_events_forever(self, interval_s: float = 0.2) -> None:
        """Send the events no report took along: once the oldest has waited interval_s.
        Most ride with the report that follows them within milliseconds (`started`,
        `stopping`, `complete`), at no request of their own."""
        while True:
            await self._events_ready.wait()
            self._events_ready = anyio.Event()
            while self._events:  # else they left with a batch of reports
                wait = self._events_since + interval_s - anyio.current_time()
                if wait > 0:
                    await anyio.sleep(wait)  # a batch may take them meanwhile
                    continue
                batch, self._events = self._events, []
                self._events_sent += 1
                delivery = {"run": self.run, "seq": self._events_sent}
                body = {"worker": self.worker, "events": batch, "delivery": delivery}
                await self.call(calls.ingest_events(body))


def _json_value(value: Any) -> Any:
    """An event field as JSON holds it: a value JSON cannot say (a path, NaN) as its text.
    The batch it rides in is encoded whole, so one such value must never fail it (the
    events would be queued again, and fail every batch after)."""
    if value is None or isinstance(value, str | bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, list | tuple):
        return [_json_value(item) for item in value]
    if isinstance(value, dict):
        return {str(key): _json_value(item) for key, item in value.items()}
    return str(value)
