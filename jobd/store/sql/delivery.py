"""Who hears of a commit, and on which thread: listeners run in commit order, after it.

A write appends what it committed here while it still holds the store's write lock, so
the queue is in commit order; once the lock is released, the writer delivers the queue.
Listeners (the broker's caches, its change feed, the controllers' queues, events.jsonl)
live on the event loop's thread and are never called from another. When the writer is
the store's own thread (store/runner.py, PostgreSQL), it queues the delivery on the loop
and goes on without waiting: the loop runs its callbacks in the order they were queued,
and the unit's result is queued after its commits' deliveries, so the caller that
awaited the unit resumes with every listener current with it, as on SQLite, where
writers are the loop. (A unit itself does not read what listeners keep: its caller
hands it what it needs.)

Listeners run outside the write lock, so a listener's own reads never wait on a writer,
and a writer on the loop never waits on a thread that waits for the loop.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import Sequence

from jobd.store.base import Change, CommitListener, EventRecord

__all__ = ["Delivery"]


class Delivery:
    """The listeners, the commits they have not heard yet, and the thread they live on."""

    def __init__(self) -> None:
        self.listeners: list[CommitListener] = []
        self._committed: deque[tuple[Sequence[Change], Sequence[EventRecord]]] = deque()
        self._home: int | None = None  # the loop's thread, once a runner has said so
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.RLock()  # one delivery at a time, whatever the thread
        self._draining = False

    def live_on_this_thread(self) -> None:
        """Listeners run on the calling thread, the running event loop's, from now on."""
        self._loop = asyncio.get_running_loop()
        self._home = threading.get_ident()

    def committed(self, changes: Sequence[Change], events: Sequence[EventRecord]) -> None:
        """Queue a commit's news: called under the write lock, so in commit order."""
        self._committed.append((changes, events))

    def deliver(self) -> None:
        """Every listener hears every queued commit, in order: before this returns on
        the loop's thread, or on the loop before anything queued there after it."""
        home, loop = self._home, self._loop
        if home is None or loop is None or home == threading.get_ident():
            self._drain()
        else:  # the store's thread: the loop delivers, in its queue's order
            loop.call_soon_threadsafe(self._drain)

    def _drain(self) -> None:
        with self._lock:
            if self._draining:  # a listener's own write: the loop below delivers it next
                return
            self._draining = True
            try:
                while self._committed:
                    changes, events = self._committed.popleft()
                    for listener in self.listeners:
                        listener(changes, events)
            finally:
                self._draining = False
