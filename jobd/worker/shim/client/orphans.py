"""The job of a shim that died without recording its end: killed, and seen gone.

A shim killed with -9 cannot end its job, and its job would run on with parent 1 while
the worker gives its slot to the next. So the agent, on finding the shim gone without a
status.json (a running job's, or one re-adopted after a restart), SIGKILLs what the shim
left, as the containment holds it (the group and session of the workload; the scope where
there is one: Containment.kill_remains), and returns only once none of it runs: only then
is the job reported ended and its place freed.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import anyio.to_thread

from jobd.worker.shim.client.handle import read_record
from jobd.worker.shim.containment import Containment, ProcessGroup
from jobd.worker.shim.procfs import ProcessIdentity
from jobd.worker.shim.protocol import STATUS_FILE, ShimRecord
from jobd.worker.shim.remains import job_remains
from jobd.worker.shim.statedir import lock_is_held

__all__ = ["REMAINS_TIMEOUT_S", "end_orphaned_job", "kill_orphaned_workload"]

# How long the agent waits for a SIGKILLed job to be gone (a process in uninterruptible
# sleep, on a hung NFS mount say, dies only when the call returns). Past it, the job is
# reported anyway, and what survived is logged.
REMAINS_TIMEOUT_S = 30.0
_POLL_S = 0.02


def _orphaned(state_dir: Path) -> ShimRecord | None:
    """The record of a job whose shim died without its status, if it started a workload."""
    state_dir = state_dir.resolve()
    if (state_dir / STATUS_FILE).exists() or lock_is_held(state_dir):
        return None  # finished, or a shim holds it: never ours to kill
    record = read_record(state_dir)
    return None if record is None or record.workload is None else record


def kill_orphaned_workload(state_dir: Path, containment: Containment | None = None) -> bool:
    """SIGKILL the job whose shim died without recording its end; True if any of it ran.

    Its exit is lost with the shim. See end_orphaned_job() to wait until it is gone.
    """
    record = _orphaned(state_dir)
    if record is None:
        return False
    return bool((containment or ProcessGroup()).kill_remains(record))


async def end_orphaned_job(
    state_dir: Path, containment: Containment, timeout_s: float = REMAINS_TIMEOUT_S
) -> tuple[list[ProcessIdentity], list[ProcessIdentity]]:
    """Kill what the dead shim of state_dir left and wait until none of it runs.

    Returns the processes killed, and those still running at timeout_s (normally none).
    A process the job forks while it is being killed is killed in the next round.
    """
    record = await anyio.to_thread.run_sync(_orphaned, state_dir)
    if record is None or record.workload is None:
        return [], []
    killed: dict[ProcessIdentity, None] = {}
    with anyio.move_on_after(timeout_s):
        while remains := job_remains(record.workload):
            killed.update(dict.fromkeys(remains))
            await anyio.to_thread.run_sync(containment.kill_remains, record)
            await anyio.sleep(_POLL_S)
    return list(killed), job_remains(record.workload)
