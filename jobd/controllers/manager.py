"""The controller manager: routes committed changes to controllers and runs their loops.

`on_commit` hears every commit (registered by broker/wiring.py, after the caches the
controllers read); each controller maps a change to the keys it cares about, and its
work queue dedups them. One task per controller processes its keys sequentially (one
object handled at a time); another resyncs it periodically. A commit the manager failed
to hear is made good by `requeue_all`.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain

import anyio

from jobd.controllers.accounting import AccountingController
from jobd.controllers.context import Context
from jobd.controllers.guards import GuardsController
from jobd.controllers.lifecycle import LifecycleController
from jobd.controllers.placement import PlacementController
from jobd.controllers.projects import ProjectsController
from jobd.controllers.queueing import Reconciler, WorkQueue, run_controller, run_resync
from jobd.controllers.reclaim import ReclaimController
from jobd.controllers.retention import RetentionController
from jobd.controllers.retries import RetriesController
from jobd.controllers.scheduler import SchedulerController
from jobd.controllers.sweeper import SweeperController
from jobd.controllers.workers import WorkersController
from jobd.store.base import Change, EventRecord

__all__ = ["Manager"]


class Manager:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.controllers: dict[str, Reconciler] = {
            c.name: c
            for c in (
                LifecycleController(ctx),
                SchedulerController(ctx),
                SweeperController(ctx),
                WorkersController(ctx),
                ProjectsController(ctx),
                PlacementController(ctx),
                GuardsController(ctx),
                RetentionController(ctx),
                RetriesController(ctx),
                AccountingController(ctx),
                ReclaimController(ctx),
            )
        }
        self.queues = {
            name: WorkQueue(clock=ctx.clock, spacing_s=getattr(c, "pass_spacing_s", 0.0))
            for name, c in self.controllers.items()
        }
        ctx.enqueue = self.enqueue

    def enqueue(self, controller: str, key: str) -> None:
        self.queues[controller].add(key)

    def on_commit(self, changes: Sequence[Change], _events: Sequence[EventRecord]) -> None:
        for name, controller in self.controllers.items():
            queue = self.queues[name]
            if hasattr(controller, "worker_coalesce_s"):
                for key, wait in _waits(controller, changes).items():
                    queue.add_after(key, wait)
                continue
            # A commit of many changes (an apply) names the same few keys again and
            # again (the scheduler's `queue`): each is handed to the queue once.
            keys = dict.fromkeys(chain.from_iterable(map(controller.keys_for, changes)))
            # A controller whose decisions run on minutes may gather a burst of
            # changes into one pass instead of one pass per change (`coalesce_s`: each
            # change waits that long); one that must answer at once spaces its passes
            # instead (`pass_spacing_s`: the queue's own, see WorkQueue).
            coalesce = getattr(controller, "coalesce_s", 0.0)
            for key in keys:
                queue.add_after(key, coalesce)

    def requeue_all(self) -> None:
        """Offer every controller all its keys: what a missed commit would have queued is
        among them (reconciles are level-triggered, so the extra keys cost a look each)."""
        for name, controller in self.controllers.items():
            for key in controller.keys_all():
                self.queues[name].add(key)

    async def run(self) -> None:
        # Each controller's first listing of keys is run_resync's (retried if it fails).
        async with anyio.create_task_group() as tg:
            for name, controller in self.controllers.items():
                tg.start_soon(run_controller, controller, self.queues[name])
                tg.start_soon(run_resync, controller, self.queues[name])


def _waits(controller: Reconciler, changes: Sequence[Change]) -> dict[str, float]:
    """The keys a commit names, each with how long it may wait: the least its changes say.

    A controller whose pass looks at every worker (the scheduler, placement) lets a key
    that only workers' changes name wait `worker_coalesce_s`: a thousand agents
    registering at once then make a pass every that long, not one each, and a new worker
    waits at most that long for its first job. A job's change still asks at once.
    """
    coalesce = getattr(controller, "coalesce_s", 0.0)
    for_workers = getattr(controller, "worker_coalesce_s", coalesce)
    waits: dict[str, float] = {}
    for change in changes:
        wait = for_workers if change.kind == "Worker" else coalesce
        for key in controller.keys_for(change):
            waits[key] = min(wait, waits.get(key, wait))
    return waits
