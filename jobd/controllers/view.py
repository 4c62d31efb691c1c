"""The cluster view: an in-memory index of workers, projects and the jobs bound to workers.

Like a client-go informer, it is loaded from the store and then kept current by the
committed changes, so a scheduling pass reads memory instead of re-reading every worker
and every running job — the cost of a decision does not grow with the size of the
cluster's history, nor with a thousand idle workers. Like an informer it is also
reloaded: at once when it failed to take in a commit, and once a sweep interval as a
safety net (broker/wiring.py registers it and decides when).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar, cast

from jobd.api.models import BOUND_PHASES, Job, Phase, Project, Worker
from jobd.store.base import Change, EventRecord, Store

__all__ = ["ClusterView"]

T = TypeVar("T")


class ClusterView:
    def __init__(self, store: Store) -> None:
        self.workers: dict[str, Worker] = {}
        self.projects: dict[str, Project] = {}
        self.bound: dict[int, Job] = {}
        # Jobs that others depend on: only their ends need their children looked up.
        self.parents: set[int] = set()
        self._by_worker: dict[str, set[int]] = {}
        # Queued jobs that capacity is being freed for (see preemption.py).
        self.nominated: dict[int, Job] = {}
        # Members bound to a worker, by array id, for arrays with a parallelism cap.
        self.array_bound: dict[int, int] = {}
        # The project of each ready queued job, and how many each project has: fair
        # share orders the queue by project only when more than one has any (scheduler).
        self.queued: dict[int, str] = {}
        self.queued_projects: dict[str, int] = {}
        # What is worked out from all the workers (of_workers), until one changes.
        self._of_workers: dict[Callable[..., Any], Any] = {}
        self.reload(store)

    def reload(self, store: Store) -> bool:
        """Read everything again from the store; True when what was held differed.

        Everything is read before anything is replaced (a failed read leaves the view as
        it was), then the containers are refilled in place: whoever holds one sees the
        new contents. Called with no commit in flight (from the commit's own listener
        call, or from the event loop with the store's thread quiet: store/runner.py),
        so no change lands between the reads.
        """
        workers, projects = store.list_workers(), store.list_projects()
        parents, bound = store.parents(), store.list_jobs(phases=BOUND_PHASES)
        nominated = [j for j in store.list_jobs(nominated=True) if j.status.phase == Phase.PENDING]
        queued = store.queued_projects()
        before = self.versions()
        _refill(self.workers, {w.name: w for w in workers})
        self._of_workers.clear()
        _refill(self.projects, {p.name: p for p in projects})
        self.parents.clear()
        self.parents.update(parents)
        self.bound.clear()
        self._by_worker.clear()
        self.array_bound.clear()
        for job in bound:
            self._bind(job)
        _refill(self.nominated, {j.id: j for j in nominated})
        self.queued.clear()
        self.queued_projects.clear()
        for job_id, project in queued.items():
            self._queue(job_id, project)
        return self.versions() != before

    def versions(self) -> tuple[dict[str, Any], ...]:
        """What the view holds, as resource versions: two views that agree here agree.

        Parents are left out: the view only ever adds to them (a deleted child's parent
        stays, costing one needless lookup of its children), so they may exceed a fresh
        load without being wrong.
        """
        by_worker = {w: sorted(ids) for w, ids in self._by_worker.items() if ids}
        return (
            _versions(self.workers),
            _versions(self.projects),
            _versions(self.bound),
            _versions(self.nominated),
            by_worker,
        )

    def of_workers(self, derive: Callable[[Iterable[Worker]], T]) -> T:
        """`derive(workers)`, worked out once and kept until a worker changes: what a
        create asks of the whole fleet (placement.shapes_of) costs it nothing per create."""
        if derive not in self._of_workers:
            self._of_workers[derive] = derive(self.workers.values())
        return cast(T, self._of_workers[derive])

    def bound_to(self, worker: str) -> list[Job]:
        """The jobs bound to one worker (a gang's: to any member's), without looking at
        anyone else's."""
        return [self.bound[i] for i in sorted(self._by_worker.get(worker, ()))]

    def on_commit(self, changes: Sequence[Change], _events: Sequence[EventRecord]) -> None:
        for change in changes:
            if change.kind == "Worker":
                self._on_worker(change)
            elif change.kind == "Project":
                self._on_project(change)
            elif change.kind == "Job":
                self._on_job(change)

    def _on_worker(self, change: Change) -> None:
        self._of_workers.clear()
        if change.op == "DELETED":
            self.workers.pop(change.key, None)
        else:
            self.workers[change.key] = Worker.model_validate_json(change.text)

    def _on_project(self, change: Change) -> None:
        if change.op == "DELETED":
            self.projects.pop(change.key, None)
        else:
            self.projects[change.key] = Project.model_validate_json(change.text)

    def _on_job(self, change: Change) -> None:
        job_id = int(change.key)
        if change.op != "ADDED":  # a new job was neither bound nor nominated before
            self._unbind(job_id)
            self.nominated.pop(job_id, None)
            self._unqueue(job_id)
        if change.op == "DELETED" or (job := change.job) is None:
            return
        status = job.status
        # Ready as the `ready` column says it (store/sql/jobs.py).
        if status.phase == Phase.PENDING and status.ready:
            self._queue(job_id, job.project)
        self.parents.update(job.status.parents)
        # The committed object itself, not a copy parsed from the change's text: nobody
        # changes a committed job (Change.obj; transitions write copies, Job.evolve), and
        # parsing a copy of each bound job was the largest cost of this listener.
        if job.status.phase in BOUND_PHASES:
            self._bind(job)
        elif job.status.phase == Phase.PENDING and job.status.nominated_worker:
            self.nominated[job_id] = job

    def _queue(self, job_id: int, project: str) -> None:
        self.queued[job_id] = project
        self.queued_projects[project] = self.queued_projects.get(project, 0) + 1

    def _unqueue(self, job_id: int) -> None:
        project = self.queued.pop(job_id, None)
        if project is not None:
            left = self.queued_projects.get(project, 1) - 1
            if left > 0:
                self.queued_projects[project] = left
            else:
                self.queued_projects.pop(project, None)

    def _bind(self, job: Job) -> None:
        self.bound[job.id] = job
        for worker in _workers_of(job):
            self._by_worker.setdefault(worker, set()).add(job.id)
        capped = _capped_array(job)
        if capped is not None:
            self.array_bound[capped] = self.array_bound.get(capped, 0) + 1

    def _unbind(self, job_id: int) -> None:
        old = self.bound.pop(job_id, None)
        if old is not None:
            for worker in _workers_of(old):
                self._by_worker.get(worker, set()).discard(job_id)
            capped = _capped_array(old)
            if capped is not None:
                left = self.array_bound.get(capped, 1) - 1
                if left > 0:
                    self.array_bound[capped] = left
                else:
                    self.array_bound.pop(capped, None)


def _workers_of(job: Job) -> list[str]:
    """The workers a bound job is on: each member's for a gang, else its one."""
    members = job.status.members
    if members:
        return [m.worker for m in members]
    return [job.status.worker or ""]


def _capped_array(job: Job) -> int | None:
    """The id of the array `job` is a member of, when that array caps its parallelism."""
    array = job.metadata.array
    return array.id if array is not None and array.parallelism is not None else None


def _refill(held: dict[Any, Any], fresh: dict[Any, Any]) -> None:
    held.clear()
    held.update(fresh)


def _versions(objects: Mapping[Any, Job | Project | Worker]) -> dict[str, int]:
    return {str(k): o.metadata.resource_version or 0 for k, o in objects.items()}
