"""Storage faults, survived: the broker notices, says so, and resumes by itself.

A write the store could not persist raises StorageFull (507 to the client) and leaves
the store's `write_error` set. While it is set, /readyz fails with that message, and
this watch probes the store once a second (`Store.probe_write`: a real write, and room
on the disk for SQLite). The first probe that succeeds clears it: the broker is ready
again, and every controller is offered all its keys at once, so what failed meanwhile
(a scheduling pass, a lease expiry) runs now rather than after its backoff, and Pending
jobs are scheduled without a restart.

Readiness is the last write's outcome, not a probe per request: a monitor polling
/readyz must not write to the store, and a write that failed is the one fact that
matters. A listener left stale by a failure, and events.jsonl left behind by a full
log disk, are resynced here too, every `resync_every` passes, so the file catches up
from the events table when its disk has room again, even if no commit comes.
"""

from __future__ import annotations

import anyio

from jobd.broker.streams.eventlog import EventLog
from jobd.broker.wiring import Wiring
from jobd.controllers.manager import Manager
from jobd.logconfig import get_logger
from jobd.store.base import Maintenance, StoreUnavailable

__all__ = ["StorageWatch"]

log = get_logger()


class StorageWatch:
    def __init__(
        self,
        store: Maintenance,
        manager: Manager,
        wiring: Wiring,
        events: EventLog,
        interval_s: float = 1.0,
        resync_every: int = 5,
    ) -> None:
        self.store, self.manager, self.wiring, self.events = store, manager, wiring, events
        self.interval_s, self.resync_every = interval_s, resync_every
        self._reported: str | None = None  # the fault last logged, so it is logged once
        self._ticks = 0

    async def run(self) -> None:
        while True:
            await anyio.sleep(self.interval_s)
            self.check()

    def check(self) -> None:
        """One look: probe a failing store; resync stale listeners now and then."""
        self._ticks += 1
        if self.store.write_error is not None:
            self._probe()
        if self._ticks % self.resync_every == 0:
            self._resync()

    def _resync(self) -> None:
        if self.wiring.stale:
            self.wiring.resync(set(self.wiring.stale))
        if self.events.behind:
            try:
                self.events.catch_up(force=True)
            except OSError as exc:
                log.warning("events_file_behind", path=str(self.events.path), error=str(exc))

    def _probe(self) -> None:
        fault = self.store.write_error
        try:
            self.store.probe_write()
        except StoreUnavailable as exc:
            if str(exc) != self._reported:
                self._reported = str(exc)
                log.error("store_write_failing", error=str(exc), first_failure=str(fault))
            return
        log.warning("store_recovered", error=str(fault))
        self._reported = None
        try:
            self.manager.requeue_all()
        except StoreUnavailable as exc:  # failing again already: the next probe retries
            log.error("store_write_failing", error=str(exc))
