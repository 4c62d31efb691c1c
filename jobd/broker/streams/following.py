"""The broker's follower: other brokers' commits reach this one's listeners, woken by NOTIFY.

On PostgreSQL several brokers may share a store; each hears its own commits from its
write path, and the others' through this loop: LISTEN on a connection of its own
(store/sql/follow.py), and on each notification read `changes` after the revision the
listeners last heard, on the store's thread (store/runner.py), so they are handed to
the same listeners (broker/wiring.py: the cluster view, the watch tail, the controllers'
queues, ...) in revision order with the broker's own. A notification of the broker's
own commit costs no read. Followed commits carry no events: events.jsonl, the metrics
of events and the notifications are the broker's that made the change; a follower only
wakes `job events -f`, which reads the table.

Without a notification for `SAFETY_NET_S` the store is read anyway, and the LISTEN
connection checked: a lost one is opened again, and what was committed meanwhile read
from the revision heard. A revision compacted before it was read (a follower away
longer than the compaction keeps) is Gone: the listeners are rebuilt from the store, as
at a start, and watchers behind the rebuilt tail are answered from the store or 410.

The database going away is logged here once (`store_unreachable`), and its return
(`store_reachable`, with how long it was away); meanwhile the listening is retried
every `RETRY_S`.
"""

from __future__ import annotations

import time

import anyio

from jobd.broker.streams.feed import ChangeFeed
from jobd.broker.wiring import Wiring
from jobd.logconfig import get_logger
from jobd.store.base import Gone, Store, StoreUnavailable
from jobd.store.runner import StoreRunner

__all__ = ["PAGE", "RETRY_S", "SAFETY_NET_S", "Follower"]

log = get_logger()

SAFETY_NET_S = 3.0  # a read without a notification, at the latest after this
RETRY_S = 0.5  # between tries to listen again while the database is away
PAGE = 1000  # changes read and handed on at a time


class Follower:
    """Keeps the broker's listeners current with every commit to the store."""

    def __init__(
        self,
        store: Store,
        runner: StoreRunner,
        feed: ChangeFeed,
        wiring: Wiring,
        safety_net_s: float = SAFETY_NET_S,
        retry_s: float = RETRY_S,
    ) -> None:
        self.store, self.runner, self.feed, self.wiring = store, runner, feed, wiring
        self.safety_net_s, self.retry_s = safety_net_s, retry_s
        self.page = PAGE
        self.away_since: float | None = None  # when the store was found unreachable
        self.followed = 0  # changes of other brokers handed to the listeners

    async def run(self) -> None:
        while True:
            try:
                await self._listen()
            except StoreUnavailable as exc:
                self._away(exc)
            await anyio.sleep(self.retry_s)

    async def _listen(self) -> None:
        async with self.store.change_signal() as signal:
            self._back()
            notified = None  # first, what was committed while nobody listened
            while True:
                try:
                    await self._follow(notified)
                except Gone as exc:
                    await self._rebuild(str(exc))
                notified = await signal.wait(self.safety_net_s)

    async def _follow(self, notified: int | None) -> None:
        if notified is not None and notified <= self.store.heard:
            return  # this broker's own commit, heard already: no hop to the store's thread
        while True:  # a page at a time, so the broker's own writes are not held up
            found = await self.runner.run(self.store.follow, notified, self.page)
            if found:
                self.followed += found
                self.feed.events_added.notify()
            if found < self.page:
                return
            notified = None

    async def _rebuild(self, why: str) -> None:
        """Start following from the store's revision now, every listener reloaded."""
        log.warning("follower_rebuilding", reason=why)
        async with self.runner.quiet():
            self.store.follow_from(self.store.revision())
            self.wiring.resync()

    def _away(self, exc: StoreUnavailable) -> None:
        if self.away_since is None:
            self.away_since = time.monotonic()
            log.error("store_unreachable", error=str(exc), retry_s=self.retry_s)

    def _back(self) -> None:
        if self.away_since is not None:
            away_s = round(time.monotonic() - self.away_since, 3)
            self.away_since = None
            log.warning("store_reachable", away_s=away_s)
