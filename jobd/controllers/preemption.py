"""Preemption: the sweeper, the manual verbs, and how victims are chosen.

The sweeper auto-preempts a running job for a queued one when the seed's four
conditions all hold: the queued job has waited for *capacity* longer than
`auto_preempt_queued_s`, the running job is preemptible, its priority is strictly lower,
and it has run longer than `auto_preempt_min_runtime_s`. It is a reconcile loop on one
key whose result is the time until the next condition can change (`requeue_after`),
so nothing polls. Preempting sets the victim's desired phase and `signal=preempt`, and
records `auto_preempt` with the write; the worker does the rest. The queued job is
nominated to the victims' worker, and the scheduler holds that capacity for it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from jobd.api.models import (
    Job,
    Phase,
    PreemptionStatus,
    set_condition,
)
from jobd.controllers.context import Context
from jobd.controllers.errors import TransitionError
from jobd.controllers.queueing import DONE, Result
from jobd.controllers.scheduler import Capacity, capacity_of, choose_worker, reserve_nominated
from jobd.store.base import Change, Conflict, EventRecord, Store

__all__ = [
    "Plan",
    "SweeperController",
    "choose_victims",
    "preempt_blockers",
    "request_preemption",
]

SWEEP_KEY = "sweep"
Reason = Literal["sweeper", "manual", "blockers"]
_CANDIDATES_PER_PASS = 200


@dataclass
class Plan:
    worker: str
    victims: list[Job]


def request_preemption(
    store: Store, job: Job, ctx: Context, reason: Reason, candidate: Job | None = None
) -> Job:
    """Drive a Running job toward Preempted; records `auto_preempt` with the write."""
    if job.status.phase != Phase.RUNNING or job.status.desired_phase != Phase.RUNNING:
        state = str(job.status.phase)
        if job.status.desired_phase != Phase.RUNNING and not job.status.phase.terminal:
            state = f"{job.status.phase} (already being driven to {job.status.desired_phase})"
        raise TransitionError(f"job {job.id} is {state}; only a Running job can be preempted")
    job = job.evolve()
    job.status.desired_phase = Phase.PREEMPTED
    job.status.signal = "preempt"
    job.status.reason = "preempted"
    job.status.preemption = PreemptionStatus(
        candidate_job=candidate.id if candidate else None,
        reason=reason,
        requested_at=ctx.clock.now(),
    )
    by = f" for job {candidate.id}" if candidate else ""
    set_condition(job.status, "PreemptionRequested", True, reason.capitalize(), f"preempted{by}")
    event = EventRecord(
        "auto_preempt",
        job=job.id,
        worker=job.status.worker,
        fields={
            "candidate_job": candidate.id if candidate else None,
            "reason": reason,
            "priority": job.status.effective.priority,
            "candidate_priority": candidate.status.effective.priority if candidate else None,
        },
    )
    return store.update_job(job, [event], durable=True)


def _on_the_way(job: Job) -> bool:
    """A bound job already told to stop: its capacity is coming back."""
    return job.status.desired_phase in (Phase.PREEMPTED, Phase.CANCELLED)


def choose_victims(
    candidate: Job,
    caps: dict[str, Capacity],
    bound: Iterable[Job],
    eligible: Callable[[Job], bool],
) -> Plan | None:
    """The fewest victims, on one worker, whose slots let `candidate` run there.

    Victims are taken lowest priority first, then most recently started (least work
    lost); jobs already on their way out count as capacity. Among workers, the plan with
    the fewest victims wins, then the one whose victims have the lowest priority.
    """
    by_worker: dict[str, list[Job]] = {}
    for job in bound:
        by_worker.setdefault(job.status.worker or "", []).append(job)
    plans: list[tuple[tuple[int, int, str], Plan]] = []
    for name, cap in caps.items():
        trial = Capacity(name, cap.free_slots, list(cap.free_gpus), dict(cap.reserved))
        jobs = by_worker.get(name, [])
        for job in filter(_on_the_way, jobs):
            _give_back(trial, job)
        victims = sorted(
            (j for j in jobs if not _on_the_way(j) and eligible(j)),
            key=lambda j: (j.status.effective.priority, -_started_ts(j)),
        )
        base = Capacity(name, trial.free_slots, list(trial.free_gpus), dict(trial.reserved))
        chosen: list[Job] = []
        while not trial.fits(candidate) and victims:
            chosen.append(victims.pop(0))
            _give_back(trial, chosen[-1])
        if trial.fits(candidate):
            chosen = _drop_unneeded(base, candidate, chosen)
            worst = max((v.status.effective.priority for v in chosen), default=-1)
            plans.append(((len(chosen), worst, name), Plan(name, chosen)))
    return min(plans, key=lambda p: p[0])[1] if plans else None


def _drop_unneeded(base: Capacity, candidate: Job, chosen: list[Job]) -> list[Job]:
    """The greedy pass may take a victim that frees a slot but not the GPU the candidate
    needs; keep only the victims it needs, trying to spare the most valuable first."""
    kept = list(chosen)
    for victim in reversed(chosen):
        rest = [v for v in kept if v is not victim]
        trial = Capacity(base.worker, base.free_slots, list(base.free_gpus), dict(base.reserved))
        for job in rest:
            _give_back(trial, job)
        if trial.fits(candidate):
            kept = rest
    return kept


def _give_back(cap: Capacity, job: Job) -> None:
    cap.free_slots += job.spec.resources.slots
    cap.free_gpus = sorted(set(cap.free_gpus) | set(job.status.gpus))


def _started_ts(job: Job) -> float:
    return job.status.started_at.timestamp() if job.status.started_at else 0.0


def _may_yield_to(job: Job, priority: int) -> bool:
    """Seed rules 2 and 3: a running, preemptible job of strictly lower priority."""
    return (
        job.status.phase == Phase.RUNNING
        and job.status.effective.preemptible
        and job.status.effective.priority < priority
    )


def _runtime_s(job: Job, now: datetime) -> float:
    return (now - job.status.started_at).total_seconds() if job.status.started_at else 0.0


def _nominate(store: Store, job: Job, worker: str) -> None:
    if job.status.nominated_worker == worker:
        return
    job = job.evolve()
    job.status.nominated_worker = worker
    set_condition(job.status, "Nominated", True, "CapacityFreed", f"capacity on {worker} held")
    store.update_job(job)


def preempt_blockers(store: Store, candidate: Job, ctx: Context, dry_run: bool) -> Plan:
    """`job preempt-blockers`: free room for a queued job now, thresholds aside."""
    if candidate.status.phase != Phase.PENDING:
        raise TransitionError(f"job {candidate.id} is {candidate.status.phase}, not queued")
    if not candidate.status.dependencies_met:
        raise TransitionError(
            f"job {candidate.id} waits for its dependencies, not for capacity; "
            "preempting would not let it run"
        )
    bound = list(ctx.view.bound.values())
    caps = capacity_of(ctx.view.workers.values(), bound)
    if not caps:
        raise TransitionError("no worker is Ready, so no preemption can make room")
    prio = candidate.status.effective.priority

    # The thresholds are waived, the other rules are not: `job preempt ID` is the verb
    # for taking a job that is not preemptible.
    plan = choose_victims(candidate, caps, bound, lambda job: _may_yield_to(job, prio))
    if plan is None:
        raise TransitionError(
            f"no set of preemptible running jobs with priority below {prio} on one worker "
            f"would make room for job {candidate.id}"
        )
    if not dry_run:
        plan.victims = [
            request_preemption(store, v, ctx, "blockers", candidate) for v in plan.victims
        ]
        _nominate(store, store.get_job(candidate.id) or candidate, plan.worker)
    return plan


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
        try:
            return self._sweep()
        except Conflict:
            return Result(requeue_after=0.01)

    def _sweep(self) -> Result:
        settings, now = self.ctx.settings, self.ctx.clock.now()
        bound = list(self.ctx.view.bound.values())
        caps = capacity_of(self.ctx.view.workers.values(), bound)
        preemptible = [
            j
            for j in bound
            if j.status.phase == Phase.RUNNING
            and not _on_the_way(j)
            and j.status.effective.preemptible
        ]
        if not preemptible:
            return DONE  # a job starting to run brings us back
        floor = min(j.status.effective.priority for j in preemptible)
        reserve_nominated(self.ctx.view, caps)
        wake: list[float] = []
        for candidate in self._candidates(floor):
            waited = (now - (candidate.status.queued_at or now)).total_seconds()
            if waited <= settings.auto_preempt_queued_s:
                wake.append(settings.auto_preempt_queued_s - waited)
                continue
            if self._act_for(candidate, caps, bound, now, wake):
                bound = list(self.ctx.view.bound.values())
        return Result(requeue_after=max(0.01, min(wake)) if wake else None)

    def _candidates(self, floor: int) -> list[Job]:
        jobs = self.ctx.store.list_jobs(
            phases=[Phase.PENDING], ready=True, by_priority=True, limit=_CANDIDATES_PER_PASS
        )
        return [j for j in jobs if j.status.effective.priority > floor]

    def _act_for(
        self,
        candidate: Job,
        caps: dict[str, Capacity],
        bound: list[Job],
        now: datetime,
        wake: list[float],
    ) -> bool:
        """Preempt for one candidate if the rules allow; True when something was written."""
        if candidate.status.nominated_worker in caps:
            return False  # room is already on its way to it
        if choose_worker(candidate, caps) is not None:
            self.ctx.enqueue("scheduler", "queue")
            return False
        min_runtime = self.ctx.settings.auto_preempt_min_runtime_s
        prio = candidate.status.effective.priority

        def eligible(job: Job) -> bool:
            return _may_yield_to(job, prio) and _runtime_s(job, now) > min_runtime

        plan = choose_victims(candidate, caps, bound, eligible)
        if plan is None:
            # Rule 4 alone holding back: look again when the youngest grows old enough.
            wake.extend(
                min_runtime - _runtime_s(j, now)
                for j in bound
                if _may_yield_to(j, prio) and _runtime_s(j, now) <= min_runtime
            )
            return False
        for victim in plan.victims:
            request_preemption(self.ctx.store, victim, self.ctx, "sweeper", candidate)
        _nominate(self.ctx.store, candidate, plan.worker)
        caps[plan.worker].reserved[candidate.id] = candidate.spec.resources
        return True


_WATCHED = {Phase.PENDING.value, Phase.RUNNING.value, Phase.PREEMPTED.value}
