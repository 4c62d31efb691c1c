"""The cluster view: an in-memory index of workers and of the jobs bound to them.

Like a client-go informer, it is loaded once from the store and then kept current by
the committed changes, so a scheduling pass reads memory instead of re-reading every
worker and every running job — the cost of a decision does not grow with the size of
the cluster's history, nor with a thousand idle workers.
"""

from __future__ import annotations

from collections.abc import Sequence

from jobd.api.models import BOUND_PHASES, Job, Worker
from jobd.store.base import Change, EventRecord, Store

__all__ = ["ClusterView"]

_BOUND = frozenset(p.value for p in BOUND_PHASES)


class ClusterView:
    def __init__(self, store: Store) -> None:
        self.workers: dict[str, Worker] = {w.name: w for w in store.list_workers()}
        self.bound: dict[int, Job] = {j.id: j for j in store.list_jobs(phases=BOUND_PHASES)}
        store.subscribe(self.on_commit)

    def on_commit(self, changes: Sequence[Change], _events: Sequence[EventRecord]) -> None:
        for change in changes:
            if change.kind == "Worker":
                self._on_worker(change)
            elif change.kind == "Job":
                self._on_job(change)

    def _on_worker(self, change: Change) -> None:
        if change.op == "DELETED":
            self.workers.pop(change.key, None)
        else:
            self.workers[change.key] = Worker.model_validate(change.body)

    def _on_job(self, change: Change) -> None:
        job_id = int(change.key)
        if change.op != "DELETED" and change.body.get("status", {}).get("phase") in _BOUND:
            self.bound[job_id] = Job.model_validate(change.body)
        else:
            self.bound.pop(job_id, None)
