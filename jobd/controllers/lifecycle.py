"""Lifecycle: the per-job loop for dependencies, cascades and Lost jobs.

A child waits in Pending until its parents end. When they all have ended as required
it joins the queue (next stage: the scheduler binds it); when one ended badly it is
Cancelled (`dependency_failed`), which in turn reaches its own children through their
keys. A job Lost for longer than the lost timeout ends as it was driven, else Failed
(a `requeue_after` timer, not a poll); only time the broker observed counts towards
it (observed.py). Opt-in `auto_resume` resubmits a preempted job
whose checkpoint completed. The moves themselves are the state machine's
(transitions.py); the verbs that users and workers send live in verbs/.
"""

from __future__ import annotations

from collections.abc import Iterable

from jobd.api.models import BOUND_PHASES, TERMINAL_PHASES, Job, Phase
from jobd.controllers import transitions
from jobd.controllers.context import Context
from jobd.controllers.queueing import DONE, Result
from jobd.controllers.verbs.resume import resume_job
from jobd.store.base import Change, Conflict

__all__ = ["LifecycleController"]


class LifecycleController:
    """Per-job reconcile: dependencies, cascade, lost timeout, auto-resume."""

    name = "lifecycle"

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.resync_s = ctx.settings.sweep_interval_s

    def keys_for(self, change: Change) -> Iterable[str]:
        job = change.job
        if job is None:
            return []
        phase = job.status.phase
        keys = []
        # Only what this loop acts on: a job waiting for parents, a Lost one, one that
        # may resume by itself; and when a job ends or goes, its children.
        waiting = phase == Phase.PENDING and not job.status.dependencies_met
        resumable = phase == Phase.PREEMPTED and job.spec.auto_resume
        if waiting or phase == Phase.LOST or resumable:
            keys.append(change.key)
        ended = phase in _TERMINAL_VALUES or change.op == "DELETED"
        if ended and int(change.key) in self.ctx.view.parents:
            keys += [str(c) for c in self.ctx.store.children_of(int(change.key))]
        return keys

    def keys_all(self) -> Iterable[str]:
        waiting = self.ctx.store.list_jobs(phases=[Phase.PENDING], ready=False)
        lost = self.ctx.store.list_jobs(phases=[Phase.LOST])
        return [str(j.id) for j in waiting + lost]

    async def reconcile(self, key: str) -> Result:
        job = self.ctx.store.get_job(int(key))
        if job is not None and _wants_auto_resume(job):
            resume_job(self.ctx, job)
            return DONE
        if job is None or job.status.phase in TERMINAL_PHASES:
            return DONE
        try:
            if job.status.phase == Phase.PENDING and not job.status.dependencies_met:
                return self._check_dependencies(job)
            if job.status.phase == Phase.LOST:
                return self._check_lost(job)
        except Conflict:
            return Result(requeue_after=0)  # changed under us: look again at once
        return DONE

    def _check_dependencies(self, job: Job) -> Result:
        store, now = self.ctx.store, self.ctx.clock.now()
        # Only the phases, in one read: a child of a job array has thousands of parents.
        phases = store.phases_of(job.status.parents)
        parents = [phases.get(p) for p in job.status.parents]  # None: deleted
        ended = [p for p in parents if p is None or p in TERMINAL_PHASES]
        failed = [p for p in job.status.parents if phases.get(p, Phase.FAILED) in _BAD_ENDS]
        if failed and not job.spec.depends_on_any_exit:
            culprit = store.get_job(failed[0])
            ref = culprit.ref if culprit else "a deleted job"
            store.update_job(*transitions.dependency_failed(job, ref, now))
            return DONE
        if len(ended) < len(parents):
            return DONE  # a parent's change will bring us back
        # Every parent ended, and each either succeeded or any exit was enough.
        store.update_job(*transitions.dependencies_met(job, now))
        return DONE

    def _check_lost(self, job: Job) -> Result:
        assert job.status.lost_at is not None
        now = self.ctx.clock.now()
        waited = self.ctx.observed.elapsed_since(job.status.lost_at)
        remaining = self.ctx.settings.lost_timeout_s - waited
        if remaining > 0:
            return Result(requeue_after=remaining)
        self.ctx.store.update_job(*transitions.lost_timeout(job, now))
        return DONE


def _wants_auto_resume(job: Job) -> bool:
    """Opt-in: a preemption whose checkpoint completed is resubmitted once."""
    return job.auto_resumes and job.status.resumed_by is None


_TERMINAL_VALUES = frozenset(p.value for p in TERMINAL_PHASES)
_BAD_ENDS = frozenset({Phase.FAILED, Phase.CANCELLED, Phase.PREEMPTED})
assert _BAD_ENDS <= TERMINAL_PHASES and Phase.LOST in BOUND_PHASES
