"""Each GPU as its worker last measured it, and the `jobd_gpu_*` families of `/metrics`.

A worker with NVML sends each GPU's memory in use and utilisation with every heartbeat
(worker/gpus.py). That reading changes with every heartbeat and is worth nothing once the
next one comes, so the broker keeps only the newest, here in memory, and never writes it
to the store (a write per heartbeat would cost more than the rest of the heartbeat). It
reaches users twice: `GpuCollector` exports it at scrape time beside what the cluster view
knows (each GPU's total memory from the worker's spec, the job holding it from the jobs
bound there), and the worker routes fill it into `status.gpu_usage` of the workers they
answer, which `job top` shows. A worker without NVML (a declared inventory such as
`--gpus 0:24GiB`) sends none: its GPUs export their totals and holders only.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from prometheus_client.core import GaugeMetricFamily, InfoMetricFamily, Metric
from prometheus_client.registry import Collector

from jobd.api.models import GpuUsage, Job, Worker, WorkerPhase
from jobd.controllers.gangs import gpus_on
from jobd.controllers.view import ClusterView

__all__ = ["GpuCollector", "GpuReadings"]

_LABELS = ["worker", "gpu"]


class GpuReadings:
    """The newest reading of each worker's GPUs, by worker name."""

    def __init__(self) -> None:
        self._by_worker: dict[str, dict[int, GpuUsage]] = {}

    def record(self, worker: str, usage: Mapping[int, GpuUsage] | None) -> None:
        """Keep what a heartbeat said; None (the worker cannot measure) forgets the last."""
        if usage is None:
            self._by_worker.pop(worker, None)
        else:
            self._by_worker[worker] = dict(usage)

    def of(self, worker: Worker) -> dict[int, GpuUsage]:
        """The worker's newest reading; none for a Lost worker (it says nothing of now)."""
        if worker.status.phase != WorkerPhase.READY:
            return {}
        return self._by_worker.get(worker.name, {})


class GpuCollector(Collector):
    """Per GPU (labels worker, gpu): memory total and used, utilisation, the job on it.

    A Lost worker's GPUs keep their totals and holders (its jobs are still bound there)
    but no reading: the last one it sent says nothing of now.
    """

    def __init__(self, view: ClusterView, readings: GpuReadings) -> None:
        self.view, self.readings = view, readings

    def collect(self) -> Iterator[Metric]:
        total = GaugeMetricFamily(
            "jobd_gpu_memory_total_bytes",
            "A GPU's memory, as the worker declared or detected it.",
            labels=_LABELS,
        )
        used = GaugeMetricFamily(
            "jobd_gpu_memory_used_bytes",
            "Memory in use on a GPU, by any process (NVML, newest heartbeat).",
            labels=_LABELS,
        )
        busy = GaugeMetricFamily(
            "jobd_gpu_utilization_ratio",
            "Share of NVML's last sample period a GPU was busy (newest heartbeat).",
            labels=_LABELS,
        )
        holder = InfoMetricFamily(
            "jobd_gpu_job",
            "The job a GPU is assigned to (none: the GPU is free).",
            labels=_LABELS,
        )
        for name, worker in sorted(self.view.workers.items()):
            readings = self.readings.of(worker)
            holders = _holders(self.view.bound_to(name), name)
            for gpu in worker.spec.gpus:
                labels = [name, str(gpu)]
                if gpu in worker.spec.gpu_memory:
                    total.add_metric(labels, worker.spec.gpu_memory[gpu])
                if (reading := readings.get(gpu)) is not None:
                    used.add_metric(labels, reading.memory_used)
                    if reading.utilization is not None:
                        busy.add_metric(labels, reading.utilization)
                if (job := holders.get(gpu)) is not None:
                    holder.add_metric(labels, _job_labels(job))
        yield from (total, used, busy, holder)


def _holders(bound: list[Job], worker: str) -> dict[int, Job]:
    """Which of the jobs bound to `worker` holds each of its GPUs."""
    return {gpu: job for job in bound for gpu in gpus_on(job, worker)}


def _job_labels(job: Job) -> dict[str, str]:
    # `job_id`, not `job`: Prometheus gives every target a `job` label of its own.
    return {"job_id": str(job.id), "job_name": job.ref, "project": job.metadata.project or ""}
