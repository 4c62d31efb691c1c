"""Prestart hooks: what no OS can run is refused first, then the checkpoint directory and
the workload's environment are made.

A store may hold a job an older broker accepted (a NUL byte in its argv, an env key with
`=`, a cwd that is gone); such a job must fail alone, with a message that says why, and
never take the agent down.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from jobd.api.secrets import MASK, patterns_with, secret_keys
from jobd.worker.checkpoints import ensure_checkpoint_dir
from jobd.worker.hooks.base import Hook, LaunchPlan
from jobd.worker.jobview import JobView
from jobd.worker.owners import checkpoint_dir_for, run_as
from jobd.worker.settings import workload_env

if TYPE_CHECKING:
    from jobd.worker.execution import Execution

__all__ = [
    "Admission",
    "CheckpointDir",
    "Environment",
    "RunAsOwner",
    "StartFailed",
    "check_launchable",
    "check_unmasked",
]


class StartFailed(Exception):
    """The job cannot be started as it is written; the message says why."""


def check_launchable(argv: Sequence[str], cwd: str, env: Mapping[str, str]) -> None:
    """Raise StartFailed naming the field no OS can take, or a cwd that does not exist or
    is not a directory."""
    if not argv or not argv[0]:
        raise StartFailed("spec.command is empty")
    for i, arg in enumerate(argv):
        if "\0" in arg:
            raise StartFailed(f"spec.command[{i}] holds a NUL byte")
    if "\0" in cwd:
        raise StartFailed("spec.cwd holds a NUL byte")
    for key, value in env.items():
        if not key or "=" in key or "\0" in key:
            raise StartFailed(f"spec.env key {key!r} is empty or holds '=' or a NUL byte")
        if "\0" in value:
            raise StartFailed(f"spec.env[{key!r}] holds a NUL byte")
    if not os.path.isdir(cwd):
        missing = "is not a directory" if os.path.exists(cwd) else "does not exist"
        raise StartFailed(f"the working directory {cwd} {missing} (spec.cwd)")


def check_unmasked(job: JobView) -> None:
    """Raise StartFailed when a secret env value arrived masked: the workload would get
    the mask for its token. Only a read as this worker, by a token that may speak as it,
    carries the real values (broker/auth/access.py); anything else is a misconfiguration."""
    env = job.spec.env
    patterns = patterns_with(job.status.effective.secret_env_keys)
    masked = [key for key in secret_keys(env, patterns) if env[key] == MASK]
    if masked:
        raise StartFailed(
            f"spec.env.{masked[0]} reached this worker masked ({MASK!r}): its token may not "
            "read this job's secrets"
        )


def _job(ex: Execution) -> JobView:
    assert ex.job is not None, "prestart runs only for an attempt started here"
    return ex.job


class RunAsOwner(Hook):
    """Whom the workload runs as: its owner, on a root worker (worker/owners.py); first,
    so that a job of an owner this host does not know fails `OwnerUnknown` before
    anything is made for it, and a job naming no cwd starts in its owner's home."""

    async def prestart(self, ex: Execution, plan: LaunchPlan) -> None:
        job = _job(ex)
        plan.owner = run_as(job.metadata.owner, ex.settings.users)
        if plan.owner is not None and not job.spec.cwd:
            plan.cwd = plan.owner.home


class Admission(Hook):
    """Refuse what no OS can run, and secrets that arrived masked."""

    async def prestart(self, ex: Execution, plan: LaunchPlan) -> None:
        job = _job(ex)
        check_launchable(plan.argv, plan.cwd, job.spec.env)
        check_unmasked(job)


class CheckpointDir(Hook):
    """The job's checkpoint directory, made before its workload may write there."""

    async def prestart(self, ex: Execution, plan: LaunchPlan) -> None:
        plan.checkpoint_dir = ensure_checkpoint_dir(ex.settings.checkpoint_root, _job(ex).id)
        if plan.owner is not None:  # the owner's, 0700: no other user's job reads it
            checkpoint_dir_for(plan.checkpoint_dir, plan.owner)


class Environment(Hook):
    """The workload's complete environment (CONTRACT.md §6)."""

    async def prestart(self, ex: Execution, plan: LaunchPlan) -> None:
        assert plan.checkpoint_dir is not None, "CheckpointDir runs first"
        plan.env = workload_env(_job(ex), ex.settings, plan.checkpoint_dir)
