"""A store with a history: what `reconcile` measures, and what `--stored` starts from.

N jobs, 99 % of them Succeeded long ago, then 1 % Pending that cannot run: half ask for
a GPU no worker has, half wait on one of those. A broker started on such a store has a
long history and a queue, and nothing in it that a scenario's own jobs would wait for.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from jobd.api.models import Job, JobSpec, JobStatus, ObjectMeta, Phase, Resources, utcnow
from jobd.bench.calls import PROJECT, TRUE
from jobd.bench.progress import Progress
from jobd.store import SQLStore

__all__ = ["fill_store"]

_BATCH = 2_000


def _history_job(i: int, base: datetime) -> Job:
    """A job that ran and succeeded long ago: what most of a busy store holds."""
    started = base + timedelta(seconds=i)
    status = JobStatus(
        phase=Phase.SUCCEEDED,
        desired_phase=Phase.SUCCEEDED,
        worker="gone-worker",
        exit_code=0,
        observed_generation=1,
        queued_at=started,
        scheduled_at=started,
        started_at=started,
        finished_at=started + timedelta(seconds=1),
    )
    return Job(
        metadata=ObjectMeta(name=f"old-{i}", project=PROJECT),
        spec=JobSpec(command=[TRUE]),
        status=status,
    )


def _pending_job(name: str, gpus: int = 0, parent: int | None = None) -> Job:
    status = JobStatus(
        queued_at=utcnow(),
        observed_generation=1,
        parents=[parent] if parent is not None else [],
        dependencies_met=parent is None,
    )
    return Job(
        metadata=ObjectMeta(name=name, project=PROJECT),
        spec=JobSpec(command=[TRUE], resources=Resources(gpus=gpus)),
        status=status,
    )


def fill_store(store: SQLStore, total: int, progress: Progress) -> None:
    """`total` jobs: 99% Succeeded, then the Pending ones that cannot be scheduled."""
    pending = max(2, total // 100)
    history = total - pending
    base = utcnow() - timedelta(days=30)
    for start in range(0, history, _BATCH):
        store.create_jobs(
            [_history_job(i, base) for i in range(start, min(history, start + _BATCH))]
        )
        progress.step(f"filling a store of {total} jobs", start, total)
    unfit = store.create_jobs([_pending_job(f"gpu-{i}", gpus=1) for i in range(pending // 2)])
    parent = unfit[0].id
    waiting = pending - len(unfit)
    store.create_jobs([_pending_job(f"child-{i}", parent=parent) for i in range(waiting)])
