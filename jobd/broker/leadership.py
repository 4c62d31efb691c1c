"""Which broker leads: the election on PostgreSQL, and what this broker does about it.

Any number of brokers may run on one PostgreSQL store; one leads (runs the reconcile
loops, the sweeper, the timers, the outbox, and takes writes), the others stand by
(serve reads; answer writes 307 to the leader, broker/http/standby.py). The lease is a
row in the store (store/sql/leadership.py) with Kubernetes' timings: a leader renews it
every `retry_period_s`, steps down once it could not for `renew_deadline_s`, and a
standby takes it `lease_s` after its last renewal. The lease alone does not fence: the
store checks the leader's epoch in every write transaction (`Store.fence`), and a write
refused for an older epoch steps this broker down at once (`on_fenced_out`).

A broker on SQLite is the only one its store can have: it leads from the start, at
epoch 0, and nothing here runs.

`Leadership` is the small object the rest of the broker asks (`is_leader`, `epoch`,
`leader_url`) and hooks into (`on_gained`, `on_lost`): the app starts and stops its
loops there, and a follower of the change feed can too.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import anyio
import anyio.abc

from jobd.logconfig import get_logger
from jobd.store.base import Fencing
from jobd.store.sql.leadership import LeaderLease

__all__ = ["LeaderTimings", "Leadership"]

log = get_logger()


@dataclass(frozen=True)
class LeaderTimings:
    """Kubernetes' recommended defaults (client-go leaderelection)."""

    lease_s: float = 15.0
    renew_deadline_s: float = 10.0
    retry_period_s: float = 2.0

    def refusal(self) -> tuple[str, str] | None:
        """(flag, reason) when the three cannot work together, else None."""
        if self.retry_period_s <= 0:
            return "--leader-retry-period", "must be above 0"
        if self.renew_deadline_s <= self.retry_period_s:
            return "--leader-renew-deadline", "must be longer than --leader-retry-period"
        if self.lease_s <= self.renew_deadline_s:
            return "--leader-lease", "must be longer than --leader-renew-deadline"
        return None


class Leadership:
    """This broker's standing: leader or standby, its epoch, and where the leader is."""

    def __init__(
        self,
        store: Fencing,
        advertise_url: str,
        lease: LeaderLease | None = None,
        timings: LeaderTimings = LeaderTimings(),
    ) -> None:
        self.store, self.lease, self.timings = store, lease, timings
        self.advertise_url = advertise_url
        self.elected = lease is not None  # False: SQLite, the one broker, always leading
        self._leading = not self.elected
        self.epoch = 0
        self._leader_url: str | None = None if self.elected else advertise_url
        self.gained: list[Callable[[int], Awaitable[None]]] = []
        self.lost: list[Callable[[], None]] = []
        self._renewed = 0.0  # time.monotonic() of the last renewal that took
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tg: anyio.abc.TaskGroup | None = None  # run()'s: where a start runs
        self._starting: anyio.CancelScope | None = None  # the last election's start
        self._resigned = False
        if self.elected:
            store.fence(0)  # a standby until elected: no write leaves this process
            store.on_fenced_out(self._fenced_out)

    @property
    def is_leader(self) -> bool:
        """Leading, and renewed within the renew deadline by this process's clock.

        A leader that wakes from a pause past its deadline answers as a standby at once,
        before its next renewal finds the lease taken (and its writes are refused by the
        store meanwhile in any case).
        """
        if not self._leading or not self.elected:
            return self._leading
        return time.monotonic() - self._renewed <= self.timings.renew_deadline_s

    @property
    def leader_url(self) -> str | None:
        """The leader's advertised URL as last read; None while nobody is known to lead."""
        if self._leading and not self.is_leader:
            return None  # this broker's own lease is in doubt
        return self._leader_url

    @classmethod
    def on_postgresql(
        cls, store: Fencing, url: str, advertise_url: str, timings: LeaderTimings
    ) -> Leadership:
        lease = LeaderLease(url, uuid.uuid4().hex, advertise_url, timings.lease_s)
        return cls(store, advertise_url, lease, timings)

    def on_gained(self, callback: Callable[[int], Awaitable[None]]) -> None:
        """`await callback(epoch)` once elected, in a task beside the renewals; stepping
        down cancels it if it is still running."""
        self.gained.append(callback)

    def on_lost(self, callback: Callable[[], None]) -> None:
        """`callback()` on stepping down, on the event loop, at once."""
        self.lost.append(callback)

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Campaign while standing by, renew while leading, every retry period.

        `tg.start(run)` returns after the first try: a lone broker serves as the
        leader from its first request (a write is not answered 503 while it starts).
        """
        if self.lease is None:
            task_status.started()
            return
        self._loop = asyncio.get_running_loop()
        async with anyio.create_task_group() as tg:
            self._tg = tg
            started = False
            while True:
                wait = self.timings.retry_period_s
                if self._leading:
                    await self._renew()
                else:
                    wait = await self._campaign()
                if not started:
                    task_status.started()
                    started = True
                await anyio.sleep(wait)

    async def campaign(self) -> bool:
        """One try at the lease now, outside `run` (an app served without its lifespan,
        as tests serve it): True when this broker leads after it."""
        if self.lease is not None and not self._leading:
            await self._campaign()
        return self.is_leader

    async def _campaign(self) -> float:
        """One try at the lease; the seconds until the next: a retry period, or less
        when the holder's lease runs out sooner (a takeover then waits for the lease
        alone, not for the lease and a retry period)."""
        assert self.lease is not None
        retry = self.timings.retry_period_s
        if self._resigned:  # stopping: never elected again
            return retry
        try:
            epoch = await anyio.to_thread.run_sync(self.lease.take)
            if epoch is None:
                holder = await anyio.to_thread.run_sync(self.lease.read)
                self._leader_url = holder.url if holder.live else None
                return min(retry, max(holder.left_s, 0.0) + 0.01)
        except Exception as exc:  # the database away, a lock wait past its timeout
            log.warning("leader_election_failed", error=_first_line(exc))
            self._leader_url = None
            return retry
        await self._gain(epoch)
        return retry

    async def _gain(self, epoch: int) -> None:
        self._renewed = time.monotonic()
        self.epoch, self._leading, self._leader_url = epoch, True, self.advertise_url
        self.store.fence(epoch)
        log.info("leader_elected", epoch=epoch, url=self.advertise_url)
        # Beside the renewals: a start slower than the lease (a loaded host rebuilding
        # its caches) must not lose the lease it is starting under.
        self._starting = anyio.CancelScope()
        if self._tg is None:  # `campaign` outside `run`: the start runs here
            await self._start(epoch, self._starting)
            return
        self._tg.start_soon(self._start, epoch, self._starting)

    async def _start(self, epoch: int, scope: anyio.CancelScope) -> None:
        with scope:
            try:
                for callback in self.gained:
                    await callback(epoch)
            except Exception:  # e.g. the store went away meanwhile: another broker may lead
                log.exception("leader_start_failed", epoch=epoch)
                self.step_down("start_failed")

    async def _renew(self) -> None:
        assert self.lease is not None
        try:
            held = await anyio.to_thread.run_sync(self.lease.renew, self.epoch)
        except Exception as exc:
            log.warning("leader_renew_failed", epoch=self.epoch, error=_first_line(exc))
            held = None  # not known: kept until the renew deadline passes
        if not self._leading:  # fenced out meanwhile
            return
        if held:
            self._renewed = time.monotonic()
        elif held is False:
            self.step_down("lease_taken")
        elif time.monotonic() - self._renewed > self.timings.renew_deadline_s:
            self.step_down("renew_deadline")

    def _fenced_out(self, epoch: int) -> None:
        """From the store's writing thread: a write found `epoch` gone."""
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._fenced_out_on_loop, epoch)

    def _fenced_out_on_loop(self, epoch: int) -> None:
        if self._leading and self.epoch == epoch:
            self.step_down("fenced_out")

    def step_down(self, reason: str) -> None:
        """Stop leading now: no write leaves this process, the loops stop."""
        if not self._leading or not self.elected:
            return
        self.store.fence(0)
        self._leading, self._leader_url = False, None
        if self._starting is not None:
            self._starting.cancel()  # a start still under way stops here
        log.warning("leader_stepped_down", epoch=self.epoch, reason=reason)
        for callback in self.lost:
            try:
                callback()
            except Exception:  # the others still have to hear it
                log.exception("leader_stop_failed", epoch=self.epoch)
        if self._tg is not None and self.lease is not None:
            # Whoever took over is named now, not at the next retry period: a write
            # meanwhile is sent there (307) rather than told to come back (503).
            self._tg.start_soon(self._learn_leader)

    async def _learn_leader(self) -> None:
        assert self.lease is not None
        try:
            holder = await anyio.to_thread.run_sync(self.lease.read)
        except Exception:  # the database away: the next campaign reads it again
            return
        if not self._leading and holder.epoch != self.epoch:  # not the lease it gave up
            self._leader_url = holder.url if holder.live else None

    def resign(self) -> None:
        """On a clean stop: step down and give the lease up, so a standby need not wait."""
        if self.lease is None:
            return
        epoch, leading = self.epoch, self._leading
        self._resigned = True
        self.step_down("stopping")
        try:
            if leading:
                self.lease.release(epoch)
        except Exception as exc:  # it runs out by itself
            log.warning("leader_release_failed", epoch=epoch, error=_first_line(exc))
        self.lease.close()


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]
