"""What a hook is: one step of a job attempt's life, run at each stage it cares about.

As Nomad's task runner has it: an Execution (jobd.worker.execution) runs its hooks in
order at each stage, and a hook that has nothing to do at a stage inherits the no-op. A
new step (run as the job's owner, pin CPUs, cap memory) is a new hook in the list, with no
edit to the others.

    prestart    before the shim is launched (only for an attempt started here): checks,
                the checkpoint directory, the environment, into the LaunchPlan
    poststart   once the workload runs (or an adopted attempt is taken back): start
                following output, reporting `started`, resuming a sentinel watch
    stop        the broker asked for a stop: SIGTERM via the shim, the grace, the sentinel
    exited      the workload's end is known: catch up on output, report `complete`
    cleanup     every task of the attempt is over: the state directory goes
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jobd.worker.execution import Execution
    from jobd.worker.shim.owner import RunAs
    from jobd.worker.shim.protocol import ExitStatus

__all__ = ["Hook", "LaunchPlan"]


@dataclass
class LaunchPlan:
    """What the prestart hooks make of a job: the parts of its launch spec."""

    argv: list[str]
    cwd: str
    env: dict[str, str] = field(default_factory=dict)  # the workload's complete environment
    checkpoint_dir: Path | None = None
    owner: RunAs | None = None  # whom the workload runs as; None: the worker's user
    limits: dict[str, Any] | None = None  # cores and memory cap, for the shim (hooks/limits.py)


class Hook:
    """One step of an attempt's life; each stage's method runs in the hooks' order."""

    async def prestart(self, ex: Execution, plan: LaunchPlan) -> None:
        return None

    async def poststart(self, ex: Execution) -> None:
        return None

    async def stop(self, ex: Execution, reason: str) -> None:
        return None

    async def exited(self, ex: Execution, end: ExitStatus) -> None:
        return None

    async def cleanup(self, ex: Execution) -> None:
        return None
