"""The agent's side of the shim: launch one, find it again, stop it, read its end.

A shim (jobd.worker.shim.process) holds a job's output files and exit status and outlives
the agent; this package is all an agent needs to work with it, through the job's state
directory and the shims' pipes. Its user is jobd.worker.execution (one Execution per job
attempt). The only part of jobd.worker.shim that may import more than the standard
library.

handle      Shim (one job's shim), adopt, scan
orphans     end_orphaned_job, kill_orphaned_workload (the job of a shim gone without a status)
starting    start_shim (as the containment says), launch (a shim of the job's own)
pool        ShimPool: the shims the agent starts ahead and feeds launch after launch
"""

from jobd.worker.shim.client.handle import Shim, adopt, read_record, scan
from jobd.worker.shim.client.orphans import end_orphaned_job, kill_orphaned_workload
from jobd.worker.shim.client.pool import ShimPool
from jobd.worker.shim.client.starting import launch, start_shim

__all__ = [
    "Shim",
    "ShimPool",
    "adopt",
    "end_orphaned_job",
    "kill_orphaned_workload",
    "launch",
    "read_record",
    "scan",
    "start_shim",
]
