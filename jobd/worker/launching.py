"""Starting a job's supervisor: what no OS can run is refused first, in words naming the field.

A store may hold a job an older broker accepted (a NUL byte in its argv, an env key with
`=`, a cwd that is gone); such a job must fail alone, with a message that says why, and
never take the agent down. Under systemd the supervisor starts inside the job's scope, so
the scope holds the whole job; else the agent's launcher forks it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import anyio.to_thread

from jobd.api.models import Job
from jobd.api.secrets import MASK, masked_keys
from jobd.worker.runner import Runner
from jobd.worker.supervision import Launcher, SupervisedJob, SupervisedSpec, launch

__all__ = ["StartFailed", "check_launchable", "check_unmasked", "start_supervised"]


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


def check_unmasked(job: Job) -> None:
    """Raise StartFailed when a secret env value arrived masked: the workload would get
    the mask for its token. Only a read as this worker, by a token that may speak as it,
    carries the real values (broker/access.py); anything else is a misconfiguration."""
    masked = masked_keys(job)
    if masked:
        raise StartFailed(
            f"spec.env.{masked[0]} reached this worker masked ({MASK!r}): its token may not "
            "read this job's secrets"
        )


async def start_supervised(
    launcher: Launcher, runner: Runner, state_dir: Path, spec: SupervisedSpec
) -> SupervisedJob:
    """A supervisor for spec, started in the job's systemd scope or forked by the launcher."""
    if runner.name != "systemd":
        return await launcher.launch(state_dir, spec)
    unit = f"jobd-job-{spec.job_id}-{spec.attempt}"
    prefix = ["systemd-run", "--user", "--scope", f"--unit={unit}", "--collect", "--quiet", "--"]
    job = await anyio.to_thread.run_sync(lambda: launch(state_dir, spec, prefix))
    await job.started()
    return job
