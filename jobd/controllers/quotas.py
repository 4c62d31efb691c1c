"""Quotas: what a project's running jobs may hold at once, and each user's running jobs.

Pure arithmetic over the jobs bound to workers, asked by the scheduler before it binds
a job (scheduler.py), by reclaim (reclaim.py) to tell a borrower from a project within
its quota, and by `job explain` to say why a job waits. A project's quota
(`spec.quota`: gpus, cpus, memory, running_jobs) may be exceeded on idle capacity when
the project borrows (`spec.borrow`, the default); `max_running_per_user` never is.
Next stage: the scheduler sets `Scheduled=False, reason=QuotaExceeded` on a job held back.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from jobd.api.models import Job, Project, ProjectQuota
from jobd.api.sizes import format_size
from jobd.api.wait_reasons import WaitReason

__all__ = [
    "QUOTA_EXCEEDED",
    "Held",
    "QuotaVerdict",
    "held_by",
    "limits_anything",
    "over_quota",
    "quota_verdict",
]

QUOTA_EXCEEDED = WaitReason.QUOTA_EXCEEDED.value  # the Scheduled=False reason it holds a job by


@dataclass
class Held:
    """What some running jobs hold together."""

    gpus: int = 0
    millicpus: int = 0
    memory: int = 0
    jobs: int = 0

    def add(self, job: Job, sign: int = 1) -> None:
        """Count `job` in: its resources once per node (a gang of 2 with 8 GPUs holds
        16), and as one job."""
        needs, times = job.spec.resources, sign * job.spec.nodes
        self.gpus += times * needs.gpus
        self.millicpus += times * needs.millicpus
        self.memory += times * needs.memory_bytes
        self.jobs += sign


@dataclass(frozen=True)
class QuotaVerdict:
    """Why a job may not start now: `message`, and whether idle capacity may still be
    borrowed for it (its project's quota, with `borrow`) or not (the per-user limit, or
    a project that does not borrow)."""

    message: str
    borrowable: bool


def held_by(bound: Iterable[Job]) -> tuple[dict[str, Held], dict[tuple[str, str], int]]:
    """What each project's bound jobs hold, and how many jobs each (project, owner) runs."""
    projects: dict[str, Held] = {}
    users: dict[tuple[str, str], int] = {}
    for job in bound:
        projects.setdefault(job.project, Held()).add(job)
        key = (job.project, job.metadata.owner or "")
        users[key] = users.get(key, 0) + 1
    return projects, users


def limits_anything(projects: Iterable[Project]) -> bool:
    """Whether any project sets a quota or a per-user limit: else no check is needed."""
    return any(
        p.spec.quota is not None or p.spec.max_running_per_user is not None for p in projects
    )


def over_quota(quota: ProjectQuota, held: Held, job: Job | None = None) -> str | None:
    """What `held` (with `job` added) holds past `quota`, as a phrase; None when within."""
    total = Held(held.gpus, held.millicpus, held.memory, held.jobs)
    if job is not None:
        total.add(job)
    if quota.gpus is not None and total.gpus > quota.gpus:
        return f"{total.gpus} GPUs, past its quota of {quota.gpus}"
    if quota.cpus is not None and total.millicpus > round(quota.cpus * 1000):
        return f"{total.millicpus / 1000:g} CPUs, past its quota of {quota.cpus:g}"
    if quota.memory is not None and total.memory > int(quota.memory):
        used, limit = format_size(total.memory), format_size(int(quota.memory))
        return f"{used} of memory, past its quota of {limit}"
    if quota.running_jobs is not None and total.jobs > quota.running_jobs:
        return f"{total.jobs} running jobs, past its quota of {quota.running_jobs}"
    return None


def quota_verdict(
    job: Job, project: Project | None, held: Held | None, user_running: int
) -> QuotaVerdict | None:
    """Whether `job` may start now as far as quotas go: None when it may.

    `held`: what its project's bound jobs hold now (None: nothing); `user_running`: how
    many bound jobs its owner has in the project.
    """
    if project is None:
        return None
    spec = project.spec
    limit = spec.max_running_per_user
    if limit is not None and user_running + 1 > limit:
        owner = job.metadata.owner or "(no owner)"
        message = (
            f"user {owner} runs {user_running} jobs of project {project.name}, "
            f"its max_running_per_user is {limit}"
        )
        return QuotaVerdict(message, borrowable=False)
    if spec.quota is None:
        return None
    past = over_quota(spec.quota, held or Held(), job)
    if past is None:
        return None
    message = f"project {project.name} would hold {past}"
    if spec.borrow:
        message += "; it may borrow idle capacity"
    return QuotaVerdict(message, borrowable=spec.borrow)
