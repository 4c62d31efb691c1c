"""The words and limits of jobd's API that need no pydantic: phases, names, ids.

`jobd.api.models` builds its models on these and re-exports them; the `job` command
imports them from here, so a verb that only shows documents never loads pydantic (a
third of `job get`'s start-up time when it did; docs/performance.md).
"""

from __future__ import annotations

import enum
import re

__all__ = [
    "API_VERSION",
    "ARRAY_INDEX",
    "BOUND_PHASES",
    "DEFAULT_PROJECT",
    "MAX_GRACE_S",
    "MAX_ID",
    "MAX_INT",
    "MAX_NODES",
    "NAME_PATTERN",
    "RESUME_FROM_RANK",
    "SCRUBBED_PHASES",
    "TERMINAL_PHASES",
    "Phase",
    "WorkerPhase",
    "array_id_of",
    "check_name",
    "normalise_worker_name",
]

API_VERSION = "jobd/v1"
MAX_GRACE_S = 300
# A multi-host job's members at most (`spec.nodes`): Slurm's own clusters rarely give one
# job more; a lab has a few hosts. Each member is a different worker.
MAX_NODES = 1024
DEFAULT_PROJECT = "default"

# The largest numbers the store holds, on both backends: job ids and event sequence
# numbers are PostgreSQL INTEGER columns (SQLite's hold more), revisions BIGINT. What is
# past them is refused as invalid (422), never sent to the store (which would answer 500).
# Counts stop at 2^53 - 1, below BIGINT's 2^63 - 1: the largest integer every JSON client
# (a float64, as JavaScript's) holds exactly, so a bound the OpenAPI document states is the
# bound a client checks.
MAX_ID = 2**31 - 1
MAX_INT = 2**53 - 1

NAME_PATTERN = r"^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$"
# The patterns here are compiled on first use (re's own cache), not at import: a `job`
# command that checks no name pays nothing for them.
_NAME = NAME_PATTERN.removeprefix("^")


# The workload's variable holding a job array member's index (CONTRACT.md §6).
ARRAY_INDEX = "JOBD_ARRAY_INDEX"
# `job resume` of a multi-host job names each rank's checkpoint in the new job's env as
# RESUME_FROM_RANK_<rank>; that member's agent gives it to the workload as RESUME_FROM.
RESUME_FROM_RANK = "RESUME_FROM_RANK_"
# How a job array is named where a job id could be: `A12` (no job's name has a capital).
_ARRAY_REF = r"A([0-9]{1,10})"


def array_id_of(ref: str) -> int | None:
    """The id in `A12` (api/arrays.py), None for anything else."""
    found = re.fullmatch(_ARRAY_REF, ref)
    if found is None or not 1 <= int(found.group(1)) <= MAX_ID:
        return None
    return int(found.group(1))


class Phase(enum.StrEnum):
    PENDING = "Pending"
    SCHEDULED = "Scheduled"
    RUNNING = "Running"
    PREEMPTING = "Preempting"
    PREEMPTED = "Preempted"
    CANCELLING = "Cancelling"
    CANCELLED = "Cancelled"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    LOST = "Lost"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL_PHASES


class WorkerPhase(enum.StrEnum):
    """A worker's own phase: Ready while its lease is renewed, Lost once it ran out
    (controllers/worker_phases.py says which verb moves it where)."""

    READY = "Ready"
    LOST = "Lost"


TERMINAL_PHASES = frozenset({Phase.SUCCEEDED, Phase.FAILED, Phase.PREEMPTED, Phase.CANCELLED})
# Where a job's secret env values leave the store (api/secrets.py). Not Preempted: `job
# resume` and `auto_resume` run its spec again, secrets included.
SCRUBBED_PHASES = frozenset({Phase.SUCCEEDED, Phase.FAILED, Phase.CANCELLED})
# Phases in which a job holds capacity on its worker.
BOUND_PHASES = frozenset(
    {Phase.SCHEDULED, Phase.RUNNING, Phase.PREEMPTING, Phase.CANCELLING, Phase.LOST}
)


def check_name(value: str, strict: bool = True) -> str:
    # fullmatch: `$` would also match before a trailing newline, once accepted.
    if not (re.fullmatch(_NAME, value) if strict else re.match(_NAME, value)):
        raise ValueError(
            "must be 1-63 lowercase letters, digits, '.', '_' or '-', "
            "starting and ending with a letter or digit"
        )
    return value


def normalise_worker_name(raw: str) -> str:
    """A worker's name from a hostname: lower case, as Kubernetes makes node names.

    `GPU-Box.lab.` becomes `gpu-box.lab` (a trailing dot only says the name is fully
    qualified). Raises ValueError, one sentence, when what is left is still no name.
    """
    name = raw.strip().rstrip(".").lower()
    try:
        return check_name(name)
    except ValueError as exc:
        shown = f"{raw!r} (as {name!r})" if name != raw else repr(raw)
        raise ValueError(f"worker name {shown} cannot be used: it {exc}") from None
