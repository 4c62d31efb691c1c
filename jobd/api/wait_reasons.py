"""Why a queued job is not running: the reasons of its `Scheduled=False` condition.

One vocabulary, modelled on Slurm's `squeue` reason codes (Resources, Priority,
Dependency, JobArrayTaskLimit, QOSMaxJobsPerUserLimit ...) in Kubernetes' CamelCase
condition reasons. The broker writes one of these into a Pending job's `Scheduled`
condition where it decides the job waits (controllers/transitions.py, the scheduler,
placement); `job get` shows it, `job explain` says the rest. A new reason is one line
here (and a line of docs/concepts.md). Standard library only: the `job` command reads it.
"""

from __future__ import annotations

import enum

__all__ = ["WaitReason"]


class WaitReason(enum.StrEnum):
    """The reasons of `Scheduled=False`, most binding first (a job waiting for several
    things says the first that applies)."""

    # No registered worker could run it even when empty (too big, or none it may use).
    UNSCHEDULABLE = "Unschedulable"
    # A retried job waits out its backoff (spec.retry) before it is queued again.
    RETRY_BACKOFF = "RetryBackoff"
    # Some job of spec.depends_on has not ended as required yet.
    WAITING_FOR_DEPENDENCIES = "WaitingForDependencies"
    # Its array already has `parallelism` members bound (Slurm's JobArrayTaskLimit).
    ARRAY_PARALLELISM = "ArrayParallelism"
    # Its project is at its quota (set by the queue's quota check, docs/concepts.md).
    QUOTA_EXCEEDED = "QuotaExceeded"
    # Some worker could run it, but the room is taken now (Slurm's Resources, Priority).
    WAITING_FOR_CAPACITY = "WaitingForCapacity"
