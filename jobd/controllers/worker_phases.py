"""A worker's phase machine, as transition_table.py is the job's: which verb moves a
worker from which phase to which.

A worker is Ready while its lease is renewed and Lost once the lease ran out with no
word from it (workers.py). Registering or renewing the lease makes it Ready again, from
either phase; expiry makes it Lost. Every write of `Worker.status.phase` goes through
`move` (the unit test walks every phase against every verb).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping

from jobd.api.models import Worker, WorkerPhase

__all__ = ["TABLE", "WorkerVerb", "move"]


class WorkerVerb(enum.StrEnum):
    REGISTER = "register"  # the agent (re)starts: verbs/worker_lease.register_worker
    RENEW = "renew"  # a heartbeat that brings news: verbs/worker_lease.heartbeat
    EXPIRE = "expire"  # the lease ran out unheard: workers.WorkersController


W = WorkerPhase
# Each verb, from each phase, the phase it leaves the worker in.
TABLE: Mapping[WorkerVerb, Mapping[WorkerPhase, WorkerPhase]] = {
    WorkerVerb.REGISTER: {W.READY: W.READY, W.LOST: W.READY},
    WorkerVerb.RENEW: {W.READY: W.READY, W.LOST: W.READY},
    WorkerVerb.EXPIRE: {W.READY: W.LOST, W.LOST: W.LOST},
}


def move(worker: Worker, verb: WorkerVerb) -> bool:
    """Set the phase `verb` leaves `worker` in (a copy the caller writes); True when the
    phase changed, which is when the caller says so in an event."""
    before = WorkerPhase(worker.status.phase)
    after = TABLE[verb][before]
    worker.status.phase = after
    return after != before
