"""The broker's store listeners: registered here, in one order, each isolated from the others.

The store calls one listener after each commit, `Wiring.on_commit`, which hands the
commit to the broker's listeners in this order:

1. `view`: the cluster view (workers, projects, bound and nominated jobs);
2. `leases`: the lease table;
3. `feed`: the watch tail, which wakes the watchers;
4. `manager`: maps the changes to controller keys;
5. `job_logs`: wakes `job logs -f` followers of jobs that changed, and removes the
   output files of jobs whose retention ran out (`job_expired`);
6. `metrics`: counts the commit's events and times what they mark (metrics/events.py);
7. `events_file`: appends the commit's events to events.jsonl;
8. `notify`: queues the notifications the commit's events ask for (notify/outbox.py);
   delivered by a task of its own, never here.

Caches first, then the manager: its `keys_for` reads the view (the lifecycle's parents),
and every pass it queues must find the caches holding the commit that queued it. The
events.jsonl writer last: it does I/O of its own (a full disk fails it), and nothing in
the broker reads the file. (`job_logs` only unlinks files; an expired job's output that
could not be unlinked is left behind, logged, and removed by nothing: no data is lost.)

Isolation lives here rather than in the store's notify loop because what a failure calls
for is the broker's business: log it, count it (`failures`, per listener), and bring the
listener's state back in line with the store. The exception never reaches the writer: its
commit is durable, and the request is answered as committed.

A listener that failed is resynced at once, after the others have heard the commit, in
the same call. The store calls this on the event loop's thread, whoever committed, and
no other commit lands meanwhile (store/sql/delivery.py: on SQLite every writer is the
loop, busy here; on PostgreSQL the store's thread waits for this call to return), so no
commit can slip between the resync's reads and the next change the listener hears
(reads take no lock and their own connection, so reading here cannot deadlock).
Deferred to a later turn of the loop, the watch tail would have a hole and a scheduling
pass could run on a view missing a worker. A resync that fails too leaves the listener
marked stale, retried after every commit and by the periodic resync (`resync_forever`,
once a sweep interval).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import anyio

from jobd.broker.metrics.events import EventMetrics
from jobd.broker.notify.outbox import Outbox
from jobd.broker.streams.eventlog import EventLog
from jobd.broker.streams.feed import ChangeFeed
from jobd.broker.streams.joblogs import JobLogs
from jobd.controllers.context import Context
from jobd.controllers.manager import Manager
from jobd.logconfig import get_logger
from jobd.store.base import Change, CommitListener, EventRecord

__all__ = [
    "Listener",
    "Wiring",
    "broker_listeners",
    "resync_forever",
]

log = get_logger()


@dataclass(frozen=True)
class Listener:
    """One consumer of commits, and how to bring it back in line with the store."""

    name: str
    on_commit: CommitListener
    resync: Callable[[], object]


def broker_listeners(
    ctx: Context,
    feed: ChangeFeed,
    manager: Manager,
    logs: JobLogs,
    events: EventLog,
    metrics: EventMetrics,
    outbox: Outbox | None = None,
) -> list[Listener]:
    """The broker's listeners, in the order the module docstring gives and explains."""
    store = ctx.store
    return [
        Listener("view", ctx.view.on_commit, lambda: ctx.view.reload(store)),
        Listener(
            "leases",
            ctx.leases.on_commit,
            lambda: ctx.leases.resync(store.list_workers(), ctx.clock.now()),
        ),
        Listener("feed", feed.on_commit, feed.rebuild),
        Listener("manager", manager.on_commit, manager.requeue_all),
        Listener("job_logs", logs.on_commit, logs.wake_all),
        # Counters cannot be recounted: a missed commit stays missed, as in any exporter.
        Listener("metrics", metrics.on_commit, lambda: None),
        Listener("events_file", events.on_commit, events.catch_up),
        # A missed commit's notifications are sent again by the next broker's start
        # (the outbox's state file says from which event).
        *([Listener("notify", outbox.on_commit, lambda: None)] if outbox else []),
    ]


class Wiring:
    """Calls each listener on every commit, in order; a failure stops nobody else."""

    def __init__(self, listeners: Sequence[Listener]) -> None:
        self.listeners = list(listeners)
        self.failures: Counter[str] = Counter()  # listener name -> failures (commits, resyncs)
        self.stale: set[str] = set()  # failed, and not yet resynced

    def on_commit(self, changes: Sequence[Change], events: Sequence[EventRecord]) -> None:
        for listener in self.listeners:
            try:
                listener.on_commit(changes, events)
            except Exception:
                self._failed(listener, "listener_failed", len(changes), len(events))
        if self.stale:
            self.resync(self.stale)

    def resync(self, names: set[str] | None = None) -> None:
        """Bring the named listeners (all, by default) back in line with the store."""
        for listener in self.listeners:
            if names is not None and listener.name not in names:
                continue
            try:
                diverged = listener.resync()
            except Exception:
                self._failed(listener, "listener_resync_failed")
                continue
            if listener.name in self.stale or diverged is True:
                self.stale.discard(listener.name)
                log.warning("listener_resynced", listener=listener.name, diverged=diverged)

    def _failed(self, listener: Listener, event: str, changes: int = 0, events: int = 0) -> None:
        self.failures[listener.name] += 1
        self.stale.add(listener.name)
        log.exception(
            event,
            listener=listener.name,
            failures=self.failures[listener.name],
            changes=changes,
            events=events,
        )


async def resync_forever(wiring: Wiring, ctx: Context) -> None:
    """The safety net under the commit path: reload the caches once a sweep interval.

    Cheap next to that interval: a read of the workers, the projects and the bound and
    nominated jobs (tens of milliseconds for thousands of bound jobs). A view found to
    differ is logged (`listener_resynced`, diverged=True): a bug, since every commit
    reaches it and a failure is resynced at once. The feed is not reloaded (it is only
    ever appended to, in revision order), nor the manager (each controller has its own
    resync) nor the events file (the table is the record). Runs on the event loop
    with the store's thread quiet (store/runner.py), so no commit lands while it reads.
    """
    interval = ctx.settings.sweep_interval_s
    if interval <= 0:
        return
    while True:
        await anyio.sleep(interval)
        async with ctx.runner.quiet():
            wiring.resync({"view", "leases"})
