"""The outbox: notifications taken from committed events, delivered off the broker's loops.

The events table is the outbox. A phase change a job's `spec.notify` or a broker-wide
`--webhook` asks to hear of is committed with its event (`job_started`, `job_finished`,
`job_lost`), so a notification is never sent for a change that rolled back. This store
listener turns those events into deliveries, one queue per receiving URL (`Sink`), and
does nothing else on the commit path: an append to a deque. One task per sink that has
something to send posts its queue in order, one request at a time, with at most
`CONCURRENCY` requests in flight over all sinks and a timeout on each, so a receiver that
never answers holds one task of its own, never a loop of the broker's.

A failure (no connection, a timeout, 5xx, 408, 429) marks the sink down and is tried
again after `backoff` seconds, doubling to `backoff_max`; what comes after waits in the
sink's queue, up to `queue_cap`, past which the oldest is dropped and counted. Another
4xx answer is the receiver refusing that body: it is dropped (`notify_dropped`). The job's
events say what its own targets and the broker's sinks did (`notify_failed` at a
delivery's first failure, `notify_delivered` when it got through after failing), which
`job describe` shows; /metrics has every sink's counts (`jobd_notify_*`).

At least once, across restarts too: `<data dir>/notify-outbox.json` holds the seq below
which every delivery is over (delivered or dropped), written at most once a second. A
broker that starts reads the events after it from the table and delivers them again, so
a receiver may see a notification twice, under the same `Idempotency-Key`.
"""

from __future__ import annotations

import json
import os
from collections import Counter, deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import anyio
import httpx
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from jobd.api.models import Job
from jobd.broker.notify.messages import Notification, body_of, headers_of, idempotency_key
from jobd.logconfig import get_logger
from jobd.store.base import Change, EventRecord, EventStore, JobStore
from jobd.store.runner import StoreRunner

__all__ = ["BrokerSink", "NotifyConfig", "Outbox", "phase_of"]

log = get_logger()

CONCURRENCY = 16  # requests in flight over all sinks
MAX_SINKS = 1000  # distinct receiving URLs with something queued
REDELIVER_MAX_EVENTS = 100_000  # at start, events read again at most
JOB_SINKS = "job"  # the metrics label of every job's own targets, summed
_RETRIED = frozenset({408, 425, 429})


class OutboxStore(EventStore, JobStore, Protocol):
    """What the outbox reads: events (the outbox itself) and the jobs they name."""


@dataclass(frozen=True)
class BrokerSink:
    """A `--webhook`: every job's phases in `on` go to `url`."""

    url: str
    on: frozenset[str]
    format: str = "json"


@dataclass(frozen=True)
class NotifyConfig:
    sinks: tuple[BrokerSink, ...] = ()
    secret: str | None = None  # --webhook-secret
    timeout_s: float = 10.0
    backoff_s: float = 1.0
    backoff_max_s: float = 300.0
    queue_cap: int = 1000


@dataclass(slots=True)
class _Delivery:
    """One notification to one target, rendered when queued: a queue holds bytes, not
    the job's documents (a thousand queued jobs' object graphs would be walked by every
    full garbage collection of the broker)."""

    seq: int
    phase: str
    job: int
    name: str  # as the job's events say it: `webhook-N`, `notify-N`
    key: str  # Idempotency-Key
    body: bytes
    secret: str | None
    attempts: int = 0


@dataclass
class Sink:
    """One receiving URL: its queue and whether it answers."""

    url: str
    label: str  # the metrics label: `webhook-N`, or JOB_SINKS
    queue: deque[_Delivery] = field(default_factory=deque)
    up: bool = True
    sending: bool = False
    last_error: str = ""


def phase_of(event: EventRecord) -> str | None:
    """The phase an event says a job reached, if it is one notifications tell of."""
    if event.event == "job_finished":
        phase = event.fields.get("phase")
        return phase if isinstance(phase, str) else None
    return _PHASE_OF.get(event.event)


_PHASE_OF = {"job_started": "Running", "job_lost": "Lost"}


class Outbox:
    """The store listener `notify` (wiring.py) and the task that delivers (`run`)."""

    def __init__(
        self, store: OutboxStore, runner: StoreRunner, config: NotifyConfig, state_file: Path
    ) -> None:
        self.store, self.runner, self.config = store, runner, config
        self.state_file = state_file
        self.sinks: dict[str, Sink] = {}
        self.counts: Counter[tuple[str, str]] = Counter()  # (label, what) -> n
        self._open: Counter[int] = Counter()  # seq -> deliveries not over
        self._seen = store.last_event_seq()  # the newest seq looked at
        self._saved = -1
        self._wake: anyio.Event | None = None  # made by `run`, on the loop
        self._redeliver(self._read_state())

    # The commit path: cheap, no I/O.

    def on_commit(self, changes: Sequence[Change], events: Sequence[EventRecord]) -> None:
        jobs: dict[int, Job] | None = None  # the commit's jobs, indexed only when needed
        for event in events:
            self._seen = max(self._seen, event.seq)
            phase = phase_of(event)
            if phase is None or event.job is None:
                continue
            if jobs is None:
                jobs = {c.obj.id: c.obj for c in changes if isinstance(c.obj, Job)}
            # An end is committed with its job; at start, or in a batch, the store has it.
            job = jobs.get(event.job) or self.store.get_job(event.job)
            if job is not None and (job.spec.notify or self.config.sinks):
                self._dispatch(Notification(event.seq, phase, job))

    def _dispatch(self, note: Notification) -> None:
        bodies: dict[str, bytes] = {}  # by format: rendered once per event

        def delivery(name: str, fmt: str, secret: str | None) -> _Delivery:
            body = bodies.get(fmt) or bodies.setdefault(fmt, body_of(note, fmt))
            key = idempotency_key(note, name)
            return _Delivery(note.seq, note.phase, note.job.id, name, key, body, secret)

        for i, sink in enumerate(self.config.sinks):
            if note.phase in sink.on:
                name = f"webhook-{i}"
                self._enqueue(sink.url, name, delivery(name, sink.format, self.config.secret))
        for i, target in enumerate(note.job.spec.notify):
            if note.phase in target.on:
                secret = target.secret or self.config.secret
                self._enqueue(target.url, JOB_SINKS, delivery(f"notify-{i}", target.format, secret))

    def _enqueue(self, url: str, label: str, delivery: _Delivery) -> None:
        sink = self.sinks.get(url)
        if sink is None:
            if len(self.sinks) >= MAX_SINKS:
                self.counts[label, "dropped:too_many_sinks"] += 1
                return
            sink = self.sinks[url] = Sink(url, label)
        if len(sink.queue) >= self.config.queue_cap:
            self._over(sink.queue.popleft())
            self.counts[label, "dropped:queue_full"] += 1
        sink.queue.append(delivery)
        self._open[delivery.seq] += 1
        if not sink.sending:  # a sink being sent to takes this one in its turn
            self._poke()

    def _poke(self) -> None:
        if self._wake is not None:
            self._wake.set()

    def _over(self, delivery: _Delivery) -> None:
        seq = delivery.seq
        self._open[seq] -= 1
        if self._open[seq] <= 0:
            del self._open[seq]

    # Delivery: one task per sink with something queued.

    async def run(self) -> None:
        limits = httpx.Limits(max_connections=CONCURRENCY, max_keepalive_connections=CONCURRENCY)
        timeout = httpx.Timeout(self.config.timeout_s)
        self._limit = anyio.CapacityLimiter(CONCURRENCY)
        try:
            await self._serve(timeout, limits)
        finally:  # the broker stopping: where every delivery stands, for the next start
            self._save_state()

    async def _serve(self, timeout: httpx.Timeout, limits: httpx.Limits) -> None:
        async with (
            httpx.AsyncClient(timeout=timeout, limits=limits, follow_redirects=False) as http,
            anyio.create_task_group() as tg,
        ):
            for sink in self.sinks.values():  # a restarted run (_keep_running) sends anew
                sink.sending = False
            saved_at = 0.0
            while True:
                self._wake = anyio.Event()
                for sink in list(self.sinks.values()):
                    if sink.queue and not sink.sending:
                        sink.sending = True
                        tg.start_soon(self._drain, http, sink)
                if anyio.current_time() - saved_at >= 1.0:  # at most once a second
                    saved_at = anyio.current_time()
                    self._save_state()
                with anyio.move_on_after(1.0):
                    await self._wake.wait()

    async def _drain(self, http: httpx.AsyncClient, sink: Sink) -> None:
        try:
            while sink.queue:
                delivery = sink.queue[0]
                try:
                    await self._deliver(http, sink, delivery)
                except Exception:  # a bug here must not stall the queue or end the task
                    log.exception("notify_delivery_failed", sink=sink.label)
                    self.counts[sink.label, "dropped:rejected"] += 1
                if sink.queue and sink.queue[0] is delivery:  # not dropped meanwhile
                    sink.queue.popleft()
                    self._over(delivery)
        finally:
            sink.sending = False
            if not sink.queue and sink.up:
                self.sinks.pop(sink.url, None)
            self._poke()

    async def _deliver(self, http: httpx.AsyncClient, sink: Sink, delivery: _Delivery) -> None:
        """Post until the receiver takes it or refuses it; back off between tries."""
        body = delivery.body
        headers = headers_of(delivery.key, delivery.phase, body, delivery.secret)
        delay = self.config.backoff_s
        while sink.queue and sink.queue[0] is delivery:
            delivery.attempts += 1
            error = await self._post(http, sink.url, body, headers)
            if error is None:
                return await self._delivered(sink, delivery)
            if error.startswith("refused"):
                return await self._refused(sink, delivery, error)
            await self._failed(sink, delivery, error)
            await anyio.sleep(delay)
            delay = min(delay * 2, self.config.backoff_max_s)

    async def _post(
        self, http: httpx.AsyncClient, url: str, body: bytes, headers: dict[str, str]
    ) -> str | None:
        """None when the receiver took it; else what went wrong, without the URL."""
        try:
            async with self._limit:
                answer = await http.post(url, content=body, headers=headers)
        except httpx.TimeoutException:
            return "timed out"
        except httpx.HTTPError as exc:
            return f"{type(exc).__name__}"  # its message holds the URL, a secret
        except (httpx.InvalidURL, ValueError) as exc:  # no request can be made to it
            return f"refused: {type(exc).__name__}"
        if answer.is_success:
            return None
        if 400 <= answer.status_code < 500 and answer.status_code not in _RETRIED:
            return f"refused: HTTP {answer.status_code}"
        return f"HTTP {answer.status_code}"

    async def _delivered(self, sink: Sink, delivery: _Delivery) -> None:
        self.counts[sink.label, "delivered"] += 1
        if not sink.up:
            sink.up = True
            log.info("notify_sink_up", sink=sink.label)
        if delivery.attempts > 1:
            await self._record(delivery, "notify_delivered")

    async def _refused(self, sink: Sink, delivery: _Delivery, error: str) -> None:
        self.counts[sink.label, "dropped:rejected"] += 1
        sink.up = True
        log.warning("notify_refused", sink=sink.label, job=delivery.job, error=error)
        await self._record(delivery, "notify_dropped", reason="rejected", error=error)

    async def _failed(self, sink: Sink, delivery: _Delivery, error: str) -> None:
        self.counts[sink.label, "failures"] += 1
        sink.last_error = error
        if sink.up:
            sink.up = False
            log.warning("notify_sink_down", sink=sink.label, error=error)
        if delivery.attempts == 1:
            await self._record(delivery, "notify_failed", error=error)

    async def _record(self, delivery: _Delivery, name: str, **extra: str) -> None:
        """The job's event of what its notification did: what `job describe` shows."""
        fields = {"sink": delivery.name, "phase": delivery.phase, "attempts": delivery.attempts}
        event = EventRecord(name, job=delivery.job, fields=fields | extra)
        try:
            await self.runner.run(self.store.append_events, [event])
        except Exception as exc:  # the store down: the log has it, the metrics count it
            log.warning("notify_event_not_recorded", job=delivery.job, error=str(exc))

    # Where every delivery stands, across restarts.

    @property
    def delivered_through(self) -> int:
        """Every delivery of an event up to this seq is over."""
        return min(self._open) - 1 if self._open else self._seen

    def _read_state(self) -> int | None:
        try:
            seq = json.loads(self.state_file.read_text())["delivered_through"]
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("notify_state_unreadable", path=str(self.state_file), error=str(exc))
            return None
        return seq if isinstance(seq, int) else None

    def _save_state(self) -> None:
        through = self.delivered_through
        if through == self._saved:
            return
        partial = self.state_file.with_name(self.state_file.name + ".part")
        try:
            partial.write_text(json.dumps({"delivered_through": through}) + "\n")
            os.replace(partial, self.state_file)
        except OSError as exc:  # a full disk: tried again next second
            log.warning("notify_state_not_saved", path=str(self.state_file), error=str(exc))
            return
        self._saved = through

    def _redeliver(self, after: int | None) -> None:
        """At start: deliver again what the events after `after` asked for (at least once)."""
        if after is None:  # a first start: nothing was promised before it
            return
        newest = self._seen
        if newest - after > REDELIVER_MAX_EVENTS:  # a receiver down for long: bounded
            log.warning("notify_redelivery_bounded", skipped=newest - after - REDELIVER_MAX_EVENTS)
            after = newest - REDELIVER_MAX_EVENTS
        while after < newest:
            records = self.store.list_events(after_seq=after, limit=1000)
            if not records:
                break
            self.on_commit((), [r for r in records if r.seq <= newest])
            after = records[-1].seq
        self._seen = newest
        if self._open:
            log.info("notify_redelivering", events=len(self._open))

    def collector(self) -> Collector:
        return _Metrics(self)


class _Metrics(Collector):
    """`jobd_notify_*`, read at scrape time. Labels never carry a URL (a secret)."""

    def __init__(self, outbox: Outbox) -> None:
        self.outbox = outbox

    def collect(self) -> Iterator[Metric]:
        counts, sinks = self.outbox.counts, list(self.outbox.sinks.values())
        labels = sorted(
            {f"webhook-{i}" for i in range(len(self.outbox.config.sinks))}
            | {label for label, _ in counts}
            | {s.label for s in sinks}
        )
        delivered = CounterMetricFamily(
            "jobd_notify_delivered", "Notifications a receiver took (2xx).", labels=["sink"]
        )
        failures = CounterMetricFamily(
            "jobd_notify_failures", "Tries that failed (retried with backoff).", labels=["sink"]
        )
        dropped = CounterMetricFamily(
            "jobd_notify_dropped",
            "Notifications given up: rejected (a 4xx), queue_full, too_many_sinks.",
            labels=["sink", "reason"],
        )
        queued = GaugeMetricFamily(
            "jobd_notify_queued", "Notifications waiting to be sent.", labels=["sink"]
        )
        down = GaugeMetricFamily(
            "jobd_notify_sinks_down",
            "Receivers whose last try failed (webhook-N: 0 or 1; job: how many).",
            labels=["sink"],
        )
        for label in labels:
            delivered.add_metric([label], counts[label, "delivered"])
            failures.add_metric([label], counts[label, "failures"])
            for reason in ("rejected", "queue_full", "too_many_sinks"):
                dropped.add_metric([label, reason], counts[label, f"dropped:{reason}"])
            mine = [s for s in sinks if s.label == label]
            queued.add_metric([label], sum(len(s.queue) for s in mine))
            down.add_metric([label], sum(1 for s in mine if not s.up))
        yield from (delivered, failures, dropped, queued, down)
