"""Binding a gang by hand, as the scheduler would, for tests that run no scheduling pass.

The scheduler binds a gang from the seats it chose (controllers/scheduler.py, one write
of `transitions.bind_gang`); a test that wants a gang on workers it names writes the
same transition from (worker, address, gpus) triples instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from jobd.api.models import Job, Member
from jobd.controllers import transitions
from jobd.controllers.errors import TransitionError
from jobd.store.base import EventRecord

__all__ = ["Placement", "bind_gang"]

# (worker, its advertised address, the GPUs the member holds there), by rank.
Placement = tuple[str, str | None, list[int]]


def bind_gang(
    job: Job, placements: Sequence[Placement], now: datetime
) -> tuple[Job, list[EventRecord]]:
    """`transitions.bind_gang` from one triple per rank, in rank order; TransitionError
    unless they name `spec.nodes` different workers."""
    if len(placements) != job.spec.nodes or len({w for w, _, _ in placements}) != len(placements):
        raise TransitionError(
            f"job {job.id} needs {job.spec.nodes} different workers, got {len(placements)}"
        )
    members = [
        Member(rank=rank, worker=worker, address=address, gpus=list(held))
        for rank, (worker, address, held) in enumerate(placements)
    ]
    return transitions.bind_gang(job, members, now)
