"""Fair share: who has used the machines lately, and whose queued jobs go first.

Usage is counted in billed resource-seconds (Slurm's TRESBillingWeights): a job bills
`gpus + cpu_weight * cpus + memory_weight * GiB` each second it runs, where a job that
names no CPUs counts one. Past usage decays with a half-life: a run of `r` billed per
second from `s` to `f` is worth `r * H/ln2 * (2^-(now-f)/H - 2^-(now-s)/H)` at `now`, so a
running job's usage so far and the same job's charge once it ends agree.

A project's factor is Slurm's classic `2^(-U/S)`: U its share of all (decayed) usage,
S its shares over the sum of the shares of the projects in play; 1 for a project that
used nothing, 0.5 for one that used exactly its share. Within one priority the
scheduler gives free capacity to the queued project of the highest factor, then first
come (scheduler.py). Fair share never preempts: reclaim (reclaim.py) is about quotas.

`Usage` is the decayed usage of each project and user, kept in the store (table `usage`,
charged by the FairShareController when a run ends) and held in memory for the
scheduler. Next stage: the scheduler's ordering, `job usage`, `/metrics`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from jobd.api.models import Job, Project, Resources
from jobd.store.base import UsageRecord

__all__ = [
    "Billing",
    "Usage",
    "UsageRow",
    "accrued",
    "decayed",
    "factors",
    "run_charge",
    "shares_of",
    "standings",
]

GIB = 1 << 30


@dataclass(frozen=True)
class Billing:
    """Billing weights and decay: a GPU-second bills 1; a CPU-second `cpu`, a
    GiB-second of memory `memory_gib`; usage halves every `half_life_s`."""

    cpu: float = 0.0625  # sixteen CPUs bill as one GPU
    memory_gib: float = 0.0078125  # 128 GiB bill as one GPU
    half_life_s: float = 7 * 86400.0

    def rate(self, resources: Resources, gpus: int | None = None) -> float:
        """What one second of a run of these resources bills."""
        cpus = resources.millicpus / 1000 if resources.millicpus else 1.0
        held = resources.gpus if gpus is None else gpus
        return held + self.cpu * cpus + self.memory_gib * resources.memory_bytes / GIB


def decayed(value: float, since_s: float, half_life_s: float) -> float:
    """`value`, counted `since_s` seconds ago, as it is worth now."""
    if since_s <= 0 or value == 0:
        return value
    return value * math.pow(2.0, -since_s / half_life_s)


def run_charge(rate: float, ran_s: float, ago_s: float, half_life_s: float) -> float:
    """What a run of `rate` for `ran_s` seconds, ended `ago_s` seconds ago, is worth now."""
    if ran_s <= 0 or rate <= 0:
        return 0.0
    scale = half_life_s / math.log(2)
    end = math.pow(2.0, -max(0.0, ago_s) / half_life_s)
    start = math.pow(2.0, -(max(0.0, ago_s) + ran_s) / half_life_s)
    return rate * scale * (end - start)


def accrued(job: Job, billing: Billing, now: datetime) -> float:
    """What a bound job has used so far, decayed to `now` (0 before it starts)."""
    started = job.status.started_at
    if started is None:
        return 0.0
    ran = (now - started).total_seconds()
    rate = billing.rate(job.spec.resources, len(job.status.gpus))
    return run_charge(rate, ran, 0.0, billing.half_life_s)


@dataclass
class UsageRow:
    """Decayed usage of one project or user: `value` as it was worth at `at` (epoch s)."""

    value: float = 0.0
    at: float = 0.0

    def now(self, now_s: float, half_life_s: float) -> float:
        return decayed(self.value, now_s - self.at, half_life_s)

    def add(self, charge: float, now_s: float, half_life_s: float) -> None:
        self.value = self.now(now_s, half_life_s) + charge
        self.at = max(self.at, now_s)


@dataclass
class Usage:
    """The stored usage of each project and of each (project, user), held in memory."""

    projects: dict[str, UsageRow] = field(default_factory=dict)
    users: dict[tuple[str, str], UsageRow] = field(default_factory=dict)

    @classmethod
    def load(cls, records: Iterable[UsageRecord]) -> Usage:
        usage = cls()
        for r in records:
            row = UsageRow(r.value, r.at)
            if r.user:
                usage.users[(r.project, r.user)] = row
            else:
                usage.projects[r.project] = row
        return usage

    def charge(self, project: str, user: str, charge: float, now_s: float, half: float) -> None:
        self.projects.setdefault(project, UsageRow()).add(charge, now_s, half)
        if user:
            self.users.setdefault((project, user), UsageRow()).add(charge, now_s, half)

    def effective(
        self, bound: Iterable[Job], billing: Billing, now: datetime
    ) -> tuple[dict[str, float], dict[tuple[str, str], float]]:
        """Each project's and user's usage now: the stored, decayed, plus what their
        running jobs have used so far."""
        now_s, half = now.timestamp(), billing.half_life_s
        projects = {name: row.now(now_s, half) for name, row in self.projects.items()}
        users = {key: row.now(now_s, half) for key, row in self.users.items()}
        for job in bound:
            used = accrued(job, billing, now)
            if used:
                projects[job.project] = projects.get(job.project, 0.0) + used
                if job.metadata.owner:
                    key = (job.project, job.metadata.owner)
                    users[key] = users.get(key, 0.0) + used
        return projects, users


def factors(
    usage: Mapping[str, float], shares: Mapping[str, int], names: Iterable[str]
) -> dict[str, float]:
    """Slurm's classic factor `2^(-U/S)` of each of `names`.

    U is a name's usage over everyone's, S its shares over the shares of every name in
    play (those of `names` and those with usage); a name with no shares listed has 1.
    """
    names = list(names)
    every = set(names) | {n for n, u in usage.items() if u > 0}
    total_usage = sum(usage.get(n, 0.0) for n in every)
    total_shares = sum(shares.get(n, 1) for n in every) or 1
    out: dict[str, float] = {}
    for name in names:
        if total_usage <= 0:
            out[name] = 1.0
            continue
        norm_usage = usage.get(name, 0.0) / total_usage
        norm_shares = shares.get(name, 1) / total_shares
        out[name] = math.pow(2.0, -norm_usage / norm_shares)
    return out


def shares_of(projects: Mapping[str, Project]) -> dict[str, int]:
    return {name: p.spec.shares for name, p in projects.items()}


def standings(
    usage: Usage,
    bound: Iterable[Job],
    projects: Mapping[str, Project],
    billing: Billing,
    now: datetime,
) -> dict[str, Any]:
    """What `job usage` and `/metrics` show: each project's usage (billed resource-seconds,
    decayed, running jobs' so far included), its share of the shares, its share of the
    usage, and its factor; each user's the same within their project (users share their
    project equally)."""
    by_project, by_user = usage.effective(bound, billing, now)
    names = sorted(set(projects) | {n for n, u in by_project.items() if u > 0})
    shares = shares_of(projects)
    total_shares = sum(shares.get(n, 1) for n in names) or 1
    total_usage = sum(by_project.get(n, 0.0) for n in names)
    project_factor = factors(by_project, shares, names)
    rows = [
        {
            "project": name,
            "usage": by_project.get(name, 0.0),
            "shares": shares.get(name, 1),
            "share": shares.get(name, 1) / total_shares,
            "usage_share": by_project.get(name, 0.0) / total_usage if total_usage else 0.0,
            "factor": project_factor[name],
        }
        for name in names
    ]
    return {
        "half_life_s": billing.half_life_s,
        "weights": {"gpu": 1.0, "cpu": billing.cpu, "memory_gib": billing.memory_gib},
        "projects": rows,
        "users": _user_rows(by_user),
    }


def _user_rows(by_user: Mapping[tuple[str, str], float]) -> list[dict[str, Any]]:
    users: dict[str, dict[str, float]] = {}
    for (project, user), used in by_user.items():
        users.setdefault(project, {})[user] = used
    rows = []
    for project in sorted(users):
        names = sorted(users[project])
        within = factors(users[project], {}, names)
        total = sum(users[project].values())
        for user in names:
            rows.append(
                {
                    "project": project,
                    "user": user,
                    "usage": users[project][user],
                    "share": 1 / len(names),
                    "usage_share": users[project][user] / total if total else 0.0,
                    "factor": within[user],
                }
            )
    return rows
