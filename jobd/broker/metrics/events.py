"""Counters and latency histograms fed by the events as they are committed.

The events are the record of what happened, so counting them (a store listener, see
wiring.py) counts exactly what the record says, with no second bookkeeping in the
controllers. Durations come from the times the records carry: a job's own timestamps
(in the commit's changes) for submit -> start and queue wait, and the worker's observed
times (`observed_at`) for preempt request -> SIGTERM and the grace used.

The one state kept is when each job's SIGTERM was seen, until its process exits: at
most one entry per job being stopped, and capped in case an exit is never reported.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime

from prometheus_client import CollectorRegistry, Counter, Histogram

from jobd.api.models import Job
from jobd.controllers.view import ClusterView
from jobd.store.base import Change, EventRecord

__all__ = ["EventMetrics"]

# Seconds: from the sub-second of a quick start to the hours a busy queue can hold a job.
WAIT_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 4 * 3600, 86400)
# Seconds: the worker's reaction to a preemption (watch + signal), up to a lost beat.
SIGNAL_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
# Seconds: grace windows are 0-300 s (CONTRACT.md §3), a kill is at the end of one.
GRACE_BUCKETS = (0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 180, 240, 300, 600)
_PENDING_STOPS_CAP = 100_000


class EventMetrics:
    """The commit listener `metrics` of wiring.py: counts events, times what they mark."""

    def __init__(self, registry: CollectorRegistry, view: ClusterView) -> None:
        self.view = view
        self._sigterm_seen: dict[int, datetime] = {}
        self._children: dict[tuple[Counter, str], Callable[[], None]] = {}
        self.events = Counter(
            "jobd_events", "Events committed, by name.", ["event"], registry=registry
        )
        self.created = Counter("jobd_jobs_created", "Jobs admitted.", registry=registry)
        self.finished = Counter(
            "jobd_jobs_finished", "Jobs ended, by final phase.", ["phase"], registry=registry
        )
        self.preemptions = Counter(
            "jobd_preemptions", "Preemptions decided, by reason.", ["reason"], registry=registry
        )
        self.checkpoints = Counter(
            "jobd_checkpoints_complete",
            "Checkpoints completed inside a preemption's grace window.",
            registry=registry,
        )
        self.workers_lost = Counter(
            "jobd_workers_lost", "Workers whose lease expired.", registry=registry
        )
        self._histograms(registry)

    def _histograms(self, registry: CollectorRegistry) -> None:
        self.submit_to_start = Histogram(
            "jobd_job_start_latency_seconds",
            "From a job's submission to its process running.",
            buckets=WAIT_BUCKETS,
            registry=registry,
        )
        self.queue_wait = Histogram(
            "jobd_job_queue_wait_seconds",
            "From a job being ready to run (queued) to its binding to a worker.",
            buckets=WAIT_BUCKETS,
            registry=registry,
        )
        self.preempt_to_sigterm = Histogram(
            "jobd_preemption_signal_latency_seconds",
            "From a preemption's request to the worker sending SIGTERM.",
            buckets=SIGNAL_BUCKETS,
            registry=registry,
        )
        self.grace_used = Histogram(
            "jobd_grace_used_seconds",
            "From SIGTERM to the job's process exiting (preempt, cancel and other stops).",
            buckets=GRACE_BUCKETS,
            registry=registry,
        )

    def on_commit(self, changes: Sequence[Change], events: Sequence[EventRecord]) -> None:
        if not events:
            return
        jobs = {c.obj.id: c.obj for c in changes if isinstance(c.obj, Job)}
        for event in events:
            self._inc(self.events, event.event)
            self._count(event)
            self._time(event, jobs.get(event.job or 0))

    def _inc(self, counter: Counter, label: str) -> None:
        """Count one in `counter`'s child of `label`: labels() is looked up once per label,
        not once per event (several microseconds each; a drained job makes four or five)."""
        inc = self._children.get((counter, label))
        if inc is None:
            inc = self._children[(counter, label)] = counter.labels(label).inc
        inc()

    def _count(self, event: EventRecord) -> None:
        name, fields = event.event, event.fields
        if name == "job_created":
            self.created.inc()
        elif name == "job_finished":
            self._inc(self.finished, str(fields.get("phase")))
        elif name == "auto_preempt":
            self._inc(self.preemptions, str(fields.get("reason")))
        elif name == "checkpoint_complete":
            self.checkpoints.inc()
        elif name == "worker_lost":
            self.workers_lost.inc()

    def _time(self, event: EventRecord, job: Job | None) -> None:
        name = event.event
        if name == "job_started" and job is not None:
            _observe(self.submit_to_start, job.metadata.created_at, job.status.started_at)
        elif name == "job_scheduled" and job is not None:
            _observe(self.queue_wait, job.status.queued_at, job.status.scheduled_at)
        elif name == "signal_sent" and event.fields.get("signal") == "SIGTERM":
            self._sigterm(event)
        elif name == "process_exited" and event.job is not None:
            sent = self._sigterm_seen.pop(event.job, None)
            _observe(self.grace_used, sent, _observed(event))

    def _sigterm(self, event: EventRecord) -> None:
        seen = _observed(event)
        if event.job is None or seen is None:
            return
        if len(self._sigterm_seen) >= _PENDING_STOPS_CAP:
            self._sigterm_seen.clear()  # exits never reported: forget, rather than grow
        self._sigterm_seen[event.job] = seen
        bound = self.view.bound.get(event.job)
        preemption = bound.status.preemption if bound is not None else None
        if event.fields.get("reason") == "preempt" and preemption is not None:
            _observe(self.preempt_to_sigterm, preemption.requested_at, seen)


def _observed(event: EventRecord) -> datetime | None:
    """When the worker saw the event (its `observed_at`), else when it was committed."""
    text = event.fields.get("observed_at") or event.ts
    try:
        return datetime.fromisoformat(text) if isinstance(text, str) and text else None
    except ValueError:
        return None


def _observe(histogram: Histogram, start: datetime | None, end: datetime | None) -> None:
    if start is None or end is None:
        return
    histogram.observe(max((end - start).total_seconds(), 0.0))
