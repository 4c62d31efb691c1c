"""`job preempt` and `job preempt-blockers`: preemption asked for by a person.

Preempting sets the victim's desired phase and `signal=preempt` and records
`auto_preempt` with the write (the sweeper uses the same verb); the worker does the rest
and reports `stopping`, then `complete`. `preempt-blockers` frees room for a queued job
now, the sweeper's thresholds waived but not its other rules, and nominates the queued
job to the victims' worker, where the scheduler holds that capacity for it. A gang is
nominated to each of the N workers its plan frees (`nominated_workers`), and held room
on every one of them.
"""

from __future__ import annotations

from jobd.api.models import Job
from jobd.controllers import transitions
from jobd.controllers.capacity import Capacity, capacity_of, schedulable
from jobd.controllers.context import Context
from jobd.controllers.errors import TransitionError
from jobd.controllers.transitions import PreemptReason, Verb
from jobd.controllers.victims import Plan, choose_victims, may_yield_to

__all__ = [
    "Plan",
    "blockers_plan",
    "hold",
    "nominate",
    "nominate_for",
    "preempt_blockers",
    "request_preemption",
]


def request_preemption(
    ctx: Context, job: Job, reason: PreemptReason, candidate: Job | None = None
) -> Job:
    """Drive a Running job toward Preempted; records `auto_preempt` with the write."""
    job, events = transitions.request_preemption(job, ctx.clock.now(), reason, candidate)
    return ctx.store.update_job(job, events, durable=True)


def nominate(ctx: Context, job: Job, worker: str) -> None:
    """Hold the capacity being freed on `worker` for the queued `job`."""
    new, events = transitions.nominate(job, worker, ctx.clock.now())
    if new is not job:
        ctx.store.update_job(new, events)


def nominate_for(ctx: Context, job: Job, plan: Plan) -> None:
    """Hold the capacity a plan frees for the queued `job`: on its worker, or on each of
    a gang's workers."""
    if not plan.gang:
        nominate(ctx, job, plan.worker)
        return
    new, events = transitions.nominate_gang(job, plan.gang, ctx.clock.now())
    if new is not job:
        ctx.store.update_job(new, events)


def hold(caps: dict[str, Capacity], candidate: Job, plan: Plan) -> None:
    """In a pass's capacities, hold what the plan frees for `candidate`, as the
    scheduler will once the nomination is written (capacity.hold_for)."""
    for worker in plan.workers:
        caps[worker].reserved[candidate.id] = candidate.spec.resources


def preempt_blockers(ctx: Context, candidate: Job, dry_run: bool) -> Plan:
    """`job preempt-blockers`: free room for a queued job now, thresholds aside."""
    bound = list(ctx.view.bound.values())
    caps = capacity_of(schedulable(ctx.view.workers.values(), ctx.leases.heard), bound)
    plan = blockers_plan(candidate, caps, bound)
    if not dry_run:
        plan.victims = [request_preemption(ctx, v, "blockers", candidate) for v in plan.victims]
        nominate_for(ctx, ctx.store.get_job(candidate.id) or candidate, plan)
    return plan


def blockers_plan(candidate: Job, caps: dict[str, Capacity], bound: list[Job]) -> Plan:
    """The victims whose preemption lets `candidate` run (`--dry-run`'s answer, and `job
    explain`'s); TransitionError saying why there are none. Pure: reads nothing."""
    transitions.allowed(Verb.NOMINATE, candidate)
    if not candidate.status.dependencies_met:
        raise TransitionError(
            f"job {candidate.id} waits for its dependencies, not for capacity; "
            "preempting would not let it run"
        )
    if candidate.status.retry_at is not None:
        raise TransitionError(
            f"job {candidate.id} waits out its retry backoff, not for capacity; "
            "preempting would not let it run"
        )
    if not caps:
        raise TransitionError("no worker is Ready, so no preemption can make room")
    prio = candidate.status.effective.priority

    # The thresholds are waived, the other rules are not: `job preempt ID` is the verb
    # for taking a job that is not preemptible.
    plan = choose_victims(candidate, caps, bound, lambda job: may_yield_to(job, prio))
    if plan is None:
        nodes = candidate.spec.nodes
        where = "one worker" if nodes == 1 else f"{nodes} workers (one member each)"
        raise TransitionError(
            f"no set of preemptible running jobs with priority below {prio} on {where} "
            f"would make room for job {candidate.id}"
        )
    return plan
