"""What a worker is set to, and what each job's workload gets from it (CONTRACT.md §6)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from jobd.api.vocabulary import ARRAY_INDEX
from jobd.worker.gangs import gang_env
from jobd.worker.jobview import JobView
from jobd.worker.limits import Enforcement

__all__ = [
    "DEFAULT_MAX_LOG_BYTES",
    "WorkerSettings",
    "attempt_of",
    "effective_grace",
    "workload_env",
]

# Never inherited by a workload: the token, the store URL (it may hold a password) and
# every other setting of jobd's own; the workload's JOBD_* variables are set below.
_PRIVATE_PREFIX = "JOBD_"
DEFAULT_MAX_LOG_BYTES = 1 << 30


@dataclass
class WorkerSettings:
    name: str
    slots: int
    gpus: list[int]
    checkpoint_root: Path
    default_grace_s: float
    state_dir: Path  # the worker's own state: a directory per job attempt under jobs/
    checkpoint_ttl_days: float | None = None  # None: keep every checkpoint directory
    max_log_bytes: int = DEFAULT_MAX_LOG_BYTES  # per output file: head and newest bytes kept
    keep_job_files: bool = False  # keep a job's state directory once it is over and shipped
    gpu_memory: dict[int, int] = field(default_factory=dict)  # GPU index -> bytes, where known
    # The inventory jobs naming CPUs and memory hold (None: not known), the labels
    # selectors match, the mount roots a job's cwd must be under (daemon/inventory.py).
    cpus: float | None = None
    memory: int | None = None
    labels: dict[str, str] = field(default_factory=dict)
    mount_roots: list[str] = field(default_factory=list)
    # `--advertise-address`: where multi-host jobs reach this host (None: the address
    # the agent reaches the broker from, worker/address.py).
    advertise_address: str | None = None
    # `--allow-user`: the owners whose jobs this worker runs (None: any its host knows).
    users: list[str] | None = None
    # How a job's cores and memory are enforced (worker/limits.py); None: detected by the
    # agent, with every core of its own pinnable and the best memory cap the host has.
    enforcement: Enforcement | None = None
    base_env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))


def attempt_of(job: JobView) -> int:
    """The run's fencing number (status.attempt), 0 where the broker says none."""
    return job.status.attempt


def workload_env(job: JobView, settings: WorkerSettings, ckpt_dir: Path) -> dict[str, str]:
    """The workload's complete environment (CONTRACT.md §6)."""
    env = {k: v for k, v in settings.base_env.items() if not k.startswith(_PRIVATE_PREFIX)}
    env.pop("RESUME_FROM", None)  # only when set by the submitter, `job resume` or a retry
    env.update(job.spec.env)
    resume_from = job.status.resume_from
    if resume_from:  # a retry of an attempt that checkpointed (controllers/retries.py)
        env["RESUME_FROM"] = resume_from
    env.update(
        {
            "JOBD_JOB_ID": str(job.id),
            "JOBD_JOB_NAME": job.metadata.name or "",
            "JOBD_PROJECT": job.project,
            "JOBD_CHECKPOINT_GRACE_S": _fmt(effective_grace(job, settings)),
            "JOBD_CHECKPOINT_DIR": str(ckpt_dir) + "/",
            # Exactly the GPUs assigned, whatever the worker inherited or the job asked
            # for: set and empty hides every GPU from a job that asked for none.
            "CUDA_VISIBLE_DEVICES": ",".join(str(g) for g in job.status.gpus),
        }
    )
    member = job.member(settings.name) if job.status.members else None
    if member is not None:  # a member of a multi-host job: its rank, its own GPUs
        env.update(gang_env(job, member))
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in member.gpus)
    if job.metadata.array is not None:  # a member of an array or sweep (api/arrays.py)
        env[ARRAY_INDEX] = str(job.metadata.array.index)
    elif ARRAY_INDEX not in job.spec.env:  # the spec's, as a resumed member's holds it
        env.pop(ARRAY_INDEX, None)  # never the worker's own
    return env


def effective_grace(job: JobView, settings: WorkerSettings) -> float:
    """Job spec > project default (both resolved by the broker) > this worker's default."""
    grace = job.status.effective.checkpoint_grace_s
    return settings.default_grace_s if grace is None else grace


def _fmt(seconds: float) -> str:
    return str(int(seconds)) if float(seconds).is_integer() else str(seconds)
