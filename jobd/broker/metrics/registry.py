"""`GET /metrics`: what Prometheus scrapes, through prometheus-client, one registry per app.

Three sources, each read where it is cheapest and truest:

- gauges of the cluster as it is now (jobs by phase, workers by status, slots and GPUs in
  use per worker, the oldest queued job's wait, the store's revision, and each running
  job's progress and newest numeric metrics) are read at scrape time by
  `ClusterCollector`, from the store's counts and the broker's cluster view, and each
  GPU's memory, utilisation and holder by `GpuCollector` (gpus.py);
- counters and latency histograms of what happened are fed by the events as they are
  committed (events.py, a store listener in wiring.py);
- the latency of every HTTP request, by route template, by `RequestTiming`
  (request_timing.py), the outermost middleware.

Counters are process-local, as in any exporter: they start at zero with the broker, and
Prometheus' `rate()` and `increase()` take the reset in their stride.

The registry is the app's own, not prometheus-client's global one: tests build many apps
in one process, and each must count only its own.
"""

from __future__ import annotations

import platform
from collections.abc import Iterator
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from typing import Protocol

from prometheus_client import CollectorRegistry, Info
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector

from jobd.api.models import Job, Phase, WorkerPhase
from jobd.broker.metrics.gpus import GpuCollector, GpuReadings
from jobd.controllers.gangs import gpus_on
from jobd.controllers.view import ClusterView
from jobd.store.base import Store, StoreUnavailable

__all__ = ["ClusterCollector", "build_registry", "exposition"]

WORKER_STATUSES = tuple(p.value for p in WorkerPhase)
# Whose progress is exported: jobs whose workload runs. A finished job's series ends, so
# the number of series stays bounded by the running jobs (and api/progress.MAX_METRICS).
PROGRESS_PHASES = (Phase.RUNNING, Phase.PREEMPTING, Phase.CANCELLING)


def build_registry(
    store: Store, view: ClusterView, revision: RevisionSource, gpus: GpuReadings
) -> CollectorRegistry:
    """A fresh registry holding the cluster gauges, the GPUs' and `jobd_build_info`."""
    registry = CollectorRegistry()  # no describe: a collect would query the store at start
    registry.register(ClusterCollector(store, view, revision))
    registry.register(GpuCollector(view, gpus))
    Info("jobd_build", "The running broker's version.", registry=registry).info(
        {"version": _jobd_version(), "python": platform.python_version()}
    )
    return registry


def exposition(registry: CollectorRegistry, accept: str | None) -> tuple[bytes, str]:
    """The scrape's body and content type: OpenMetrics when the scraper asks for it."""
    encoder, content_type = choose_encoder(accept or "")
    return encoder(registry), content_type


class RevisionSource(Protocol):
    """Where the store's newest revision is read (the change feed's tail)."""

    @property
    def revision(self) -> int: ...


class ClusterCollector(Collector):
    """Gauges read at scrape time: the cluster as the store and the view have it now."""

    def __init__(self, store: Store, view: ClusterView, feed: RevisionSource) -> None:
        self.store, self.view, self.feed = store, view, feed

    def collect(self) -> Iterator[Metric]:
        yield from self._stored()
        yield self._workers()
        yield from self._per_worker()
        yield from self._progress()
        revision = GaugeMetricFamily(
            "jobd_store_revision", "The store's newest revision (grows with every write)."
        )
        revision.add_metric([], self.feed.revision)
        yield revision

    def _stored(self) -> Iterator[Metric]:
        """The families read from the store, left out while it cannot be read: the rest
        of the scrape (what the broker holds, `jobd_store_reachable`) still answers."""
        try:
            found = [self._jobs(), self._oldest_queued()]
        except StoreUnavailable:
            return
        yield from found

    def _jobs(self) -> Metric:
        counts = self.store.count_jobs_by_phase()
        jobs = GaugeMetricFamily("jobd_jobs", "Jobs by phase.", labels=["phase"])
        for phase in Phase:
            jobs.add_metric([phase.value], counts.get(phase.value, 0))
        return jobs

    def _workers(self) -> Metric:
        workers = GaugeMetricFamily("jobd_workers", "Workers by status.", labels=["status"])
        known = list(self.view.workers.values())
        for status in WORKER_STATUSES:
            workers.add_metric([status], sum(1 for w in known if w.status.phase == status))
        return workers

    def _oldest_queued(self) -> Metric:
        oldest = self.store.list_jobs(phases=[Phase.PENDING], ready=True, limit=1)
        age = 0.0
        if oldest and oldest[0].status.queued_at:
            age = (datetime.now(UTC) - oldest[0].status.queued_at).total_seconds()
        gauge = GaugeMetricFamily(
            "jobd_queue_oldest_age_seconds", "Wait of the oldest job queued for capacity."
        )
        gauge.add_metric([], max(age, 0.0))
        return gauge

    def _per_worker(self) -> Iterator[Metric]:
        names = ("slots", "slots_used", "gpus", "gpus_used")
        helps = (
            "Concurrent jobs the worker takes.",
            "Slots taken by the jobs bound to the worker.",
            "GPUs the worker hands out.",
            "GPUs assigned to the jobs bound to the worker.",
        )
        families = [
            GaugeMetricFamily(f"jobd_worker_{n}", h, labels=["worker"])
            for n, h in zip(names, helps, strict=True)
        ]
        for name, worker in sorted(self.view.workers.items()):
            bound = self.view.bound_to(name)
            values = (
                worker.spec.slots,
                sum(j.spec.resources.slots for j in bound),
                len(worker.spec.gpus),
                sum(len(gpus_on(j, name)) for j in bound),
            )
            for family, value in zip(families, values, strict=True):
                family.add_metric([name], value)
        yield from families

    def _progress(self) -> Iterator[Metric]:
        # `job_id`, not `job`: Prometheus gives every target a `job` label of its own.
        labels = ["job_id", "job_name"]
        ratio = GaugeMetricFamily(
            "jobd_job_progress_ratio",
            "A running job's reported step / total (jobd.client.report_progress).",
            labels=labels,
        )
        metric = GaugeMetricFamily(
            "jobd_job_metric",
            "A running job's newest reported numeric metric, by name.",
            labels=[*labels, "metric"],
        )
        for job in self._reporting():
            progress = job.status.progress
            assert progress is not None
            ids = [str(job.id), job.ref]
            if progress.fraction is not None:
                ratio.add_metric(ids, progress.fraction)
            for name, value in progress.metrics.items():
                if not isinstance(value, str):
                    metric.add_metric([*ids, name], value)
        yield ratio
        yield metric

    def _reporting(self) -> list[Job]:
        """The running jobs that reported progress, by id."""
        jobs = self.view.bound.values()
        live = [j for j in jobs if j.status.phase in PROGRESS_PHASES and j.status.progress]
        return sorted(live, key=lambda j: j.id)


def _jobd_version() -> str:
    try:
        return version("jobd")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"
