"""Reclaim: a project within its quota takes back the capacity a borrower holds.

A project that borrows (`spec.borrow`) may run past its quota on idle capacity
(fairqueue.py). When a ready queued job of a project with a quota fits within that
quota but no worker has room for it, this loop preempts running jobs of projects past
their own quota — preemptible ones only, on one worker, the fewest that make room
(victims.py) — through the seed's path B (SIGTERM, grace, sentinel, events) with
`auto_preempt` reason `reclaim` naming the waiting job, and nominates that job to the
worker so the scheduler holds the freed room for it. A non-preemptible borrowed job is
left to finish. Priority plays no part here: the sweeper's four rules stay the only
priority preemption (sweeper.py), and fair share never preempts. Next stage: the worker
stops the victims; the scheduler binds the nominated job.
"""

from __future__ import annotations

from collections.abc import Iterable

from jobd.api.models import Job, Phase, Project
from jobd.controllers.capacity import (
    Capacity,
    capacity_of,
    choose_seat,
    reserve_nominated,
    room_on_its_way,
    schedulable,
)
from jobd.controllers.context import Context
from jobd.controllers.queueing import DONE, Result
from jobd.controllers.quotas import Held, held_by, over_quota, quota_verdict
from jobd.controllers.verbs.preempt import hold, nominate_for, request_preemption
from jobd.controllers.victims import choose_victims, on_the_way
from jobd.store.base import Change, Conflict

__all__ = ["RECLAIM_KEY", "ReclaimController", "borrowers", "takes_only_borrowed"]

RECLAIM_KEY = "reclaim"
_CANDIDATES_PER_PASS = 200


def borrowers(held: dict[str, Held], projects: dict[str, Project]) -> set[str]:
    """The projects whose running jobs hold more than their quota."""
    out = set()
    for name, holds in held.items():
        project = projects.get(name)
        quota = project.spec.quota if project is not None else None
        if quota is not None and over_quota(quota, holds) is not None:
            out.add(name)
    return out


def takes_only_borrowed(
    victims: list[Job], held: dict[str, Held], projects: dict[str, Project]
) -> bool:
    """Whether stopping `victims` leaves each of their projects at or past its quota in
    every dimension it exceeded: reclaim takes back what was borrowed, never more."""
    after = {name: Held(h.gpus, h.millicpus, h.memory, h.jobs) for name, h in held.items()}
    for victim in victims:
        after.setdefault(victim.project, Held()).add(victim, -1)
    for name in {v.project for v in victims}:
        quota = projects[name].spec.quota
        assert quota is not None  # a lender has one (borrowers)
        before, left = held[name], after[name]
        for limit, had, has in (
            (quota.gpus, before.gpus, left.gpus),
            (
                None if quota.cpus is None else round(quota.cpus * 1000),
                before.millicpus,
                left.millicpus,
            ),
            (None if quota.memory is None else int(quota.memory), before.memory, left.memory),
            (quota.running_jobs, before.jobs, left.jobs),
        ):
            if limit is not None and had > limit and has < limit:
                return False
    return True


class ReclaimController:
    """One key: look for queued jobs within their quota that borrowers keep waiting."""

    name = "reclaim"
    coalesce_s = 0.1  # a burst of changes makes one pass

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.resync_s = ctx.settings.sweep_interval_s

    def keys_for(self, change: Change) -> Iterable[str]:
        if change.kind in ("Worker", "Project"):  # room, or a quota, may have moved
            return [RECLAIM_KEY]
        job = change.job
        return [RECLAIM_KEY] if job is not None and job.status.phase in _WATCHED else []

    def keys_all(self) -> Iterable[str]:
        return [RECLAIM_KEY]

    async def reconcile(self, key: str) -> Result:
        view = self.ctx.view
        if not any(p.spec.quota is not None for p in view.projects.values()):
            return DONE  # no quota, no borrowing: nothing to reclaim (and no look at what runs)
        held, _users = held_by(j for j in view.bound.values() if not on_the_way(j))
        lenders = borrowers(held, dict(view.projects))
        if not lenders:
            return DONE  # nobody holds borrowed capacity
        pending = await self.ctx.runner.run(self._queue_head)
        try:
            self._reclaim(pending, lenders)
        except Conflict:  # a job read before changed since (off the loop): look again
            return Result(requeue_after=0.01)
        return DONE

    def _queue_head(self) -> list[Job]:
        return self.ctx.store.list_jobs(
            phases=[Phase.PENDING], ready=True, by_priority=True, limit=_CANDIDATES_PER_PASS
        )

    def _reclaim(self, pending: list[Job], lenders: set[str]) -> None:
        view = self.ctx.view
        bound = list(view.bound.values())
        caps = capacity_of(schedulable(view.workers.values(), self.ctx.leases.heard), bound)
        reserve_nominated(view, caps)
        # What is being stopped already is not borrowed any more.
        held, users = held_by(j for j in bound if not on_the_way(j))
        for candidate in pending:
            if candidate.project in lenders or room_on_its_way(candidate, caps):
                continue
            project = view.projects.get(candidate.project)
            if project is None or project.spec.quota is None:
                continue  # no quota, nothing to reclaim: it waits as anyone does
            owner = (candidate.project, candidate.metadata.owner or "")
            verdict = quota_verdict(
                candidate, project, held.get(candidate.project), users.get(owner, 0)
            )
            if verdict is not None:
                continue  # past its own quota: it may borrow, not reclaim
            if choose_seat(candidate, caps) is not None:
                self.ctx.enqueue("scheduler", "queue")
                continue
            self._act_for(candidate, caps, bound, lenders)

    def _act_for(
        self, candidate: Job, caps: dict[str, Capacity], bound: list[Job], lenders: set[str]
    ) -> None:
        def eligible(job: Job) -> bool:
            return (
                job.project in lenders
                and job.status.phase == Phase.RUNNING
                and job.status.effective.preemptible
                and not on_the_way(job)
            )

        plan = choose_victims(candidate, caps, bound, eligible)
        if plan is None:
            return  # the borrowed capacity is not preemptible, or not where it would fit
        staying = held_by(j for j in bound if not on_the_way(j))[0]
        if not takes_only_borrowed(plan.victims, staying, dict(self.ctx.view.projects)):
            return  # room for it would take more than the borrowers borrowed
        for victim in plan.victims:
            request_preemption(self.ctx, victim, "reclaim", candidate)
        nominate_for(self.ctx, candidate, plan)
        hold(caps, candidate, plan)


_WATCHED = {Phase.PENDING.value, Phase.RUNNING.value, Phase.PREEMPTED.value}
