"""Victim choice: which running jobs to preempt so that a queued job can run.

Pure policy, on the capacity model (capacity.py) and the jobs bound to workers. The
sweeper (sweeper.py) asks it with the seed's four conditions as `eligible`; the
`preempt-blockers` verb (verbs/preempt.py) with the thresholds waived. Next stage: the
caller requests preemption of each victim and nominates the queued job to the worker.

Gangs (`spec.nodes > 1`): a gang candidate needs room on N distinct workers at once, so
its plan frees N workers (`choose_gang_victims`) or is None, and nothing is preempted for
it. A running gang as a victim is ONE victim, and stopping it gives back room on every
one of its members' workers (capacity.give_back, worker by worker).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime

from jobd.api.models import Job, Phase
from jobd.controllers import eligibility
from jobd.controllers.capacity import Capacity, give_back, holdings

__all__ = [
    "Plan",
    "choose_gang_victims",
    "choose_victims",
    "frees_for",
    "may_yield_to",
    "on_the_way",
    "runtime_s",
]


@dataclass
class Plan:
    worker: str
    victims: list[Job]
    # A gang's plan: every worker room is freed (or free) on, one member each, rank 0's
    # (`worker`) first. Empty for a job of one node.
    gang: list[str] = field(default_factory=list)

    @property
    def workers(self) -> list[str]:
        """The workers the candidate is nominated to: the gang's, else the one."""
        return self.gang or [self.worker]


def on_the_way(job: Job) -> bool:
    """A bound job already told to stop (preempted, cancelled, timed out): its capacity
    is coming back."""
    return job.status.desired_phase in (Phase.PREEMPTED, Phase.CANCELLED, Phase.FAILED)


def may_yield_to(job: Job, priority: int) -> bool:
    """Seed rules 2 and 3: a running, preemptible job of strictly lower priority."""
    return (
        job.status.phase == Phase.RUNNING
        and job.status.effective.preemptible
        and job.status.effective.priority < priority
    )


def runtime_s(job: Job, now: datetime) -> float:
    return (now - job.status.started_at).total_seconds() if job.status.started_at else 0.0


def choose_victims(
    candidate: Job,
    caps: dict[str, Capacity],
    bound: Iterable[Job],
    eligible: Callable[[Job], bool],
) -> Plan | None:
    """The fewest victims, on one worker, whose slots, GPUs, CPUs and memory let
    `candidate` run there (each victim taken frees some of what it still lacks); for a
    gang, on N workers (choose_gang_victims).

    Victims are taken lowest priority first, then most recently started (least work
    lost); jobs already on their way out count as capacity. Among workers, the plan with
    the fewest victims wins, then the one whose victims have the lowest priority.
    """
    by_worker = _by_worker(bound)
    if candidate.spec.nodes > 1:
        return choose_gang_victims(candidate, caps, by_worker, eligible)
    plans = [
        found
        for name, cap in caps.items()
        if (found := _plan_on(candidate, cap, by_worker.get(name, []), eligible)) is not None
    ]
    return min(plans, key=lambda p: p[0])[1] if plans else None


PlanKey = tuple[int, int, str]  # victims, the highest priority among them, the worker


def _by_worker(bound: Iterable[Job]) -> dict[str, list[Job]]:
    """The bound jobs by worker; a gang under each of its members' workers."""
    by_worker: dict[str, list[Job]] = {}
    for job in bound:
        for worker, _gpus in holdings(job):
            by_worker.setdefault(worker, []).append(job)
    return by_worker


def _plan_on(
    candidate: Job, cap: Capacity, jobs: list[Job], eligible: Callable[[Job], bool]
) -> tuple[PlanKey, Plan] | None:
    """The fewest of `jobs` (those on `cap`'s worker) whose stopping lets `candidate` run
    there, with the plan's key; None when no set of them does."""
    name = cap.worker
    if cap.spec is not None and not eligibility.eligible(candidate.spec, name, cap.spec):
        return None  # no victim there makes the candidate welcome (its selector, pin, cwd)
    if not cap.knows(candidate.metadata.owner):
        return None  # nor where its owner does not exist
    trial = cap.copy()
    for job in filter(on_the_way, jobs):
        give_back(trial, job)
    victims = sorted(
        (j for j in jobs if not on_the_way(j) and frees_for(j, candidate) and eligible(j)),
        key=lambda j: (j.status.effective.priority, -_started_ts(j)),
    )
    base = trial.copy()
    chosen: list[Job] = []
    while not trial.fits(candidate):
        # The first in order that frees what the candidate still lacks here.
        lacking = trial.lacks(candidate)
        victim = next((v for v in victims if _holds(v) & lacking), None)
        if victim is None:
            break
        victims.remove(victim)
        chosen.append(victim)
        give_back(trial, victim)
    if not trial.fits(candidate):
        return None
    chosen = _drop_unneeded(base, candidate, chosen)
    worst = max((v.status.effective.priority for v in chosen), default=-1)
    return (len(chosen), worst, name), Plan(name, chosen)


def choose_gang_victims(
    candidate: Job,
    caps: dict[str, Capacity],
    by_worker: dict[str, list[Job]],
    eligible: Callable[[Job], bool],
) -> Plan | None:
    """Room for every member of a gang at once: N distinct workers, each made to fit by
    the fewest victims (none where it fits already); None when N cannot be, so that
    nothing is preempted for a gang that still could not run.

    Workers are taken one at a time, the cheapest plan first: fewest victims per worker
    it makes room on (a running gang stopped on one worker frees its members' other
    workers too: one victim, several workers), then the lowest priority among them. A
    victim chosen counts as stopped everywhere it runs, so a worker it was on may then
    cost nothing more.
    """
    trials = {name: cap.copy() for name, cap in caps.items()}
    left = {name: list(jobs) for name, jobs in by_worker.items()}

    def plan_on(name: str) -> tuple[PlanKey, Plan] | None:
        return _plan_on(candidate, trials[name], left.get(name, []), eligible)

    # Each worker's plan, worked out again only where a victim chosen ran.
    plans = {name: found for name in trials if (found := plan_on(name)) is not None}
    chosen: list[str] = []
    victims: dict[int, Job] = {}
    while len(chosen) < candidate.spec.nodes:
        if not plans:
            return None
        keyed = [(_per_worker(candidate, p, trials, left, chosen), p[1]) for p in plans.values()]
        plan = min(keyed, key=lambda k: k[0])[1]
        chosen.append(plan.worker)
        del plans[plan.worker]
        touched: set[str] = set()
        for victim in plan.victims:
            victims[victim.id] = victim
            touched |= _stop_in_trial(victim, trials, left)
        for name in touched.intersection(plans):
            found = plan_on(name)
            if found is None:
                del plans[name]
            else:
                plans[name] = found
    return Plan(chosen[0], list(victims.values()), chosen)


def _per_worker(
    candidate: Job,
    found: tuple[PlanKey, Plan],
    trials: dict[str, Capacity],
    left: dict[str, list[Job]],
    chosen: list[str],
) -> tuple[float, int, str]:
    """A plan's key for a gang: its victims per worker they make room on (its own, and
    any other not chosen yet that a gang victim's stopping would let a member fit)."""
    (count, worst, name), plan = found
    others = {w for v in plan.victims for w, _ in holdings(v)} - {name, *chosen}
    freed = 1
    for worker in sorted(others & trials.keys()):
        trial = trials[worker].copy()
        for victim in plan.victims:
            give_back(trial, victim)
        stopped = {v.id for v in plan.victims}
        rest = [j for j in left.get(worker, []) if j.id not in stopped]
        if _plan_on(candidate, trial, rest, _never) is not None:
            freed += 1
    return count / freed, worst, name


def _never(_job: Job) -> bool:
    return False


def _stop_in_trial(
    victim: Job, trials: dict[str, Capacity], left: dict[str, list[Job]]
) -> set[str]:
    """Count `victim` as stopped on every worker it holds room on, in the trial; those
    workers."""
    touched = set()
    for worker, _gpus in holdings(victim):
        touched.add(worker)
        if worker in trials:
            give_back(trials[worker], victim)
        if worker in left:
            left[worker] = [j for j in left[worker] if j.id != victim.id]
    return touched


def frees_for(victim: Job, candidate: Job) -> bool:
    """Whether stopping `victim` frees something `candidate` asks for: a GPU for a GPU
    job, a slot for a CPU job, CPUs or memory for a job naming them. Stopping a CPU job
    never lets a GPU job run, nor the reverse, unless CPUs or memory are what it lacks."""
    return bool(_holds(victim) & _asks(candidate))


def _holds(job: Job) -> set[str]:
    """The dimensions a running job gives back when it stops."""
    needs = job.spec.resources
    held = {
        "slots": needs.slots > 0,
        "gpus": bool(job.status.gpus),
        "cpus": needs.millicpus > 0,
        "memory": needs.memory_bytes > 0,
    }
    return {dimension for dimension, holds in held.items() if holds}


def _asks(job: Job) -> set[str]:
    needs = job.spec.resources
    asked = {
        "slots": needs.slots > 0,
        "gpus": needs.gpus > 0,
        "cpus": needs.millicpus > 0,
        "memory": needs.memory_bytes > 0,
    }
    return {dimension for dimension, asks in asked.items() if asks}


def _drop_unneeded(base: Capacity, candidate: Job, chosen: list[Job]) -> list[Job]:
    """The greedy pass may take a victim whose GPU is too small for the candidate;
    keep only the victims it needs, trying to spare the most valuable first."""
    kept = list(chosen)
    for victim in reversed(chosen):
        rest = [v for v in kept if v is not victim]
        trial = base.copy()
        for job in rest:
            give_back(trial, job)
        if trial.fits(candidate):
            kept = rest
    return kept


def _started_ts(job: Job) -> float:
    return job.status.started_at.timestamp() if job.status.started_at else 0.0
