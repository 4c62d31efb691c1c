"""A worker's disk, as its heartbeat says: the `DiskFull` condition, and no new job there
while it holds.

A worker whose state directory's disk is full cannot hold a new job's output, or even its
state directory; the agent says so on each heartbeat (jobd.worker.diskspace) until space
is back. Placement (capacity.capacity_of) offers no room on such a worker, as on a
cordoned one; what runs there goes on.
"""

from __future__ import annotations

from datetime import datetime

from jobd.api.models import Worker, set_condition

__all__ = ["DISK_FULL", "disk_is_full", "note_disk"]

DISK_FULL = "DiskFull"


def disk_is_full(worker: Worker) -> bool:
    # Asked of every worker in every scheduling pass; most have no condition at all.
    conditions = worker.status.conditions
    return bool(conditions) and any(c.type == DISK_FULL and c.status == "True" for c in conditions)


def note_disk(worker: Worker, disk_full: str | None, now: datetime) -> bool:
    """Set the worker's DiskFull condition from its heartbeat; True if it changed."""
    if disk_full is None and not any(c.type == DISK_FULL for c in worker.status.conditions):
        return False  # never full: no condition to keep (nor for an older agent)
    before = [c.model_copy() for c in worker.status.conditions]
    reason = "OutputDiskFull" if disk_full is not None else "SpaceAvailable"
    set_condition(worker.status, DISK_FULL, disk_full is not None, reason, disk_full or "", now=now)
    return worker.status.conditions != before
