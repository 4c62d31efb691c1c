"""The sweeper: auto-preemption on the seed's four conditions.

It auto-preempts a running job for a queued one when all four hold: the queued job has
waited for *capacity* longer than `auto_preempt_queued_s`, the running job is
preemptible, its priority is strictly lower, and it has run longer than
`auto_preempt_min_runtime_s`. It is a reconcile loop on one key whose result is the time
until the next condition can change (`requeue_after`), so nothing polls. Victims are
chosen by victims.py; preempting them and nominating the queued job to their worker are
the same verbs `job preempt-blockers` uses (verbs/preempt.py). A gang candidate is acted
for only when N workers can be freed at once (each nominated), and a running gang is one
victim whose stopping frees all its members' workers. Next stage: the worker stops the
victims, and the scheduler holds the freed capacity for the nominated job.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from jobd.api.models import Job, Phase
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
from jobd.controllers.verbs.preempt import hold, nominate_for, request_preemption
from jobd.controllers.victims import choose_victims, may_yield_to, on_the_way, runtime_s
from jobd.store.base import Change, Conflict

__all__ = ["SWEEP_KEY", "SweeperController"]

SWEEP_KEY = "sweep"
_CANDIDATES_PER_PASS = 200


class SweeperController:
    """The seed's four conditions, checked when they can change and not otherwise."""

    name = "sweeper"
    coalesce_s = 0.2  # thresholds are minutes; a burst of changes makes one pass

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.resync_s = ctx.settings.sweep_interval_s

    def keys_for(self, change: Change) -> Iterable[str]:
        if change.kind == "Worker":
            return [SWEEP_KEY]
        job = change.job
        return [SWEEP_KEY] if job is not None and job.status.phase in _WATCHED else []

    def keys_all(self) -> Iterable[str]:
        return [SWEEP_KEY]

    async def reconcile(self, key: str) -> Result:
        # The queue's head is read on the store's thread off the loop (store/runner.py);
        # what runs, and where room is, is the view's, read on the loop after it.
        if not _preemptible(self.ctx.view.bound.values()):
            return DONE  # a job starting to run brings us back
        pending = await self.ctx.runner.run(self._queue_head)
        try:
            return self._sweep(pending)
        except Conflict:  # a job read before changed since (off the loop): look again
            return Result(requeue_after=0.01)

    def _sweep(self, pending: list[Job]) -> Result:
        settings, now = self.ctx.settings, self.ctx.clock.now()
        bound = list(self.ctx.view.bound.values())
        workers = schedulable(self.ctx.view.workers.values(), self.ctx.leases.heard)
        caps = capacity_of(workers, bound)
        preemptible = _preemptible(bound)
        if not preemptible:
            return DONE  # a job starting to run brings us back
        floor = min(j.status.effective.priority for j in preemptible)
        reserve_nominated(self.ctx.view, caps)
        wake: list[float] = []
        for candidate in [j for j in pending if j.status.effective.priority > floor]:
            waited = (now - (candidate.status.queued_at or now)).total_seconds()
            if waited <= settings.auto_preempt_queued_s:
                wake.append(settings.auto_preempt_queued_s - waited)
                continue
            if self._act_for(candidate, caps, bound, now, wake):
                bound = list(self.ctx.view.bound.values())
        return Result(requeue_after=max(0.01, min(wake)) if wake else None)

    def _queue_head(self) -> list[Job]:
        """The ready queued jobs a pass may act for, highest priority first."""
        return self.ctx.store.list_jobs(
            phases=[Phase.PENDING], ready=True, by_priority=True, limit=_CANDIDATES_PER_PASS
        )

    def _act_for(
        self,
        candidate: Job,
        caps: dict[str, Capacity],
        bound: list[Job],
        now: datetime,
        wake: list[float],
    ) -> bool:
        """Preempt for one candidate if the rules allow; True when something was written."""
        if room_on_its_way(candidate, caps):
            return False
        if choose_seat(candidate, caps) is not None:
            self.ctx.enqueue("scheduler", "queue")
            return False
        min_runtime = self.ctx.settings.auto_preempt_min_runtime_s
        prio = candidate.status.effective.priority

        def eligible(job: Job) -> bool:
            return may_yield_to(job, prio) and runtime_s(job, now) > min_runtime

        plan = choose_victims(candidate, caps, bound, eligible)
        if plan is None:
            # Rule 4 alone holding back: look again when the youngest grows old enough.
            wake.extend(
                min_runtime - runtime_s(j, now)
                for j in bound
                if may_yield_to(j, prio) and runtime_s(j, now) <= min_runtime
            )
            return False
        for victim in plan.victims:
            request_preemption(self.ctx, victim, "sweeper", candidate)
        nominate_for(self.ctx, candidate, plan)
        hold(caps, candidate, plan)
        return True


def _preemptible(bound: Iterable[Job]) -> list[Job]:
    """The running jobs a preemption could stop."""
    return [
        j
        for j in bound
        if j.status.phase == Phase.RUNNING and not on_the_way(j) and j.status.effective.preemptible
    ]


_WATCHED = {Phase.PENDING.value, Phase.RUNNING.value, Phase.PREEMPTED.value}
