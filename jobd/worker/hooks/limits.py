"""The job's limits into its launch: its cores and memory cap (jobd.worker.limits says
which and how), and OMP_NUM_THREADS / MKL_NUM_THREADS to its CPUs unless its env sets
them. The shim applies them around the spawn (jobd.worker.shim.limits)."""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path
from typing import TYPE_CHECKING

import anyio

from jobd.logconfig import get_logger
from jobd.worker.hooks.base import Hook, LaunchPlan
from jobd.worker.limits import THREAD_VARIABLES, thread_count
from jobd.worker.shim.client import read_record

if TYPE_CHECKING:
    from jobd.worker.execution import Execution

__all__ = ["ApplyLimits"]

log = get_logger()
# How many times (50 ms apart) a leftover job cgroup is emptied and removed.
_EMPTYING_TRIES = 40


class ApplyLimits(Hook):
    """The job's cores and memory cap into its launch plan (prestart), or, re-adopted,
    its cores read back from its workload (poststart)."""

    async def prestart(self, ex: Execution, plan: LaunchPlan) -> None:
        assert ex.job is not None
        resources, host = ex.job.spec.resources, ex.host
        if resources.cpus is None and resources.memory is None:
            return  # best effort, as before: no pinning, no cap, no cgroup
        cores = None
        if resources.cpus is not None:
            for name in THREAD_VARIABLES:
                if name not in ex.job.spec.env:
                    plan.env[name] = str(thread_count(resources.cpus))
            if host.enforcement.cpu == "affinity":
                cores = ex.cpuset = host.cores.take(ex.job_id, resources.cpus)
        plan.limits = host.enforcement.limits(cores, resources.memory).to_dict()
        ex.link.event(
            "limits_applied",
            ex.job_id,
            attempt=ex.attempt,
            cpuset=cores,
            memory=resources.memory,
            memory_enforcement=host.enforcement.memory if resources.memory else None,
        )

    async def poststart(self, ex: Execution) -> None:
        if not ex.adopted or not ex.host.enforcement.cores:
            return
        record = read_record(ex.state_dir)
        if record is None or record.workload is None:
            return
        try:
            cores = sorted(os.sched_getaffinity(record.workload.pid))
        except OSError:
            return
        if set(cores) < os.sched_getaffinity(0):  # pinned, not to every core of ours
            ex.host.cores.hold(ex.job_id, cores)
            ex.cpuset = cores

    async def cleanup(self, ex: Execution) -> None:
        """The job's cgroup, if its shim could not remove it (killed -9, say): what is
        still in it (a process that left the job's group and session) is killed first."""
        enforcement = ex.host.enforcement
        if enforcement.cgroup_root is None or enforcement.cgroup_parent is None:
            return
        if ex.job is not None and ex.job.spec.resources.memory is None:
            return  # it had none
        parent = enforcement.cgroup_parent.lstrip("/")
        cgroup = Path(enforcement.cgroup_root, parent, ex.state_dir.name)
        for _ in range(_EMPTYING_TRIES):
            try:
                left = [int(pid) for pid in (cgroup / "cgroup.procs").read_text().split()]
            except (OSError, ValueError):
                return  # removed by its shim: the usual end
            for pid in left:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(OSError):
                cgroup.rmdir()
                return
            await anyio.sleep(0.05)
        log.warning("job_cgroup_left", job=ex.job_id, cgroup=str(cgroup))
