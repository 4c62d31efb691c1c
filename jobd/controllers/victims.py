"""Victim choice: which running jobs to preempt so that a queued job can run.

Pure policy, on the capacity model (capacity.py) and the jobs bound to workers. The
sweeper (sweeper.py) asks it with the seed's four conditions as `eligible`; the
`preempt-blockers` verb (verbs/preempt.py) with the thresholds waived. Next stage: the
caller requests preemption of each victim and nominates the queued job to the worker.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime

from jobd.api.models import Job, Phase
from jobd.controllers.capacity import Capacity, give_back

__all__ = ["Plan", "choose_victims", "frees_for", "may_yield_to", "on_the_way", "runtime_s"]


@dataclass
class Plan:
    worker: str
    victims: list[Job]


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
    """The fewest victims, on one worker, whose slots or GPUs let `candidate` run there.

    Victims are taken lowest priority first, then most recently started (least work
    lost); jobs already on their way out count as capacity. Among workers, the plan with
    the fewest victims wins, then the one whose victims have the lowest priority.
    """
    by_worker: dict[str, list[Job]] = {}
    for job in bound:
        by_worker.setdefault(job.status.worker or "", []).append(job)
    plans: list[tuple[tuple[int, int, str], Plan]] = []
    for name, cap in caps.items():
        trial = cap.copy()
        jobs = by_worker.get(name, [])
        for job in filter(on_the_way, jobs):
            give_back(trial, job)
        victims = sorted(
            (j for j in jobs if not on_the_way(j) and frees_for(j, candidate) and eligible(j)),
            key=lambda j: (j.status.effective.priority, -_started_ts(j)),
        )
        base = trial.copy()
        chosen: list[Job] = []
        while not trial.fits(candidate) and victims:
            chosen.append(victims.pop(0))
            give_back(trial, chosen[-1])
        if trial.fits(candidate):
            chosen = _drop_unneeded(base, candidate, chosen)
            worst = max((v.status.effective.priority for v in chosen), default=-1)
            plans.append(((len(chosen), worst, name), Plan(name, chosen)))
    return min(plans, key=lambda p: p[0])[1] if plans else None


def frees_for(victim: Job, candidate: Job) -> bool:
    """Whether stopping `victim` frees what `candidate` lacks: a GPU for a GPU job, a
    slot for a CPU job. Stopping a CPU job never lets a GPU job run, nor the reverse."""
    if candidate.spec.resources.gpus:
        return bool(victim.status.gpus)
    return victim.spec.resources.slots > 0


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
