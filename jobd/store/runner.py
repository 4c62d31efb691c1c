"""Where a unit of store work runs: inline on the event loop, or on the store's thread.

On SQLite a query takes microseconds, less than handing it to a thread would: the broker
runs its store work inline, on the event loop. On PostgreSQL each statement is a round
trip to a server, and the loop would serve nothing else meanwhile; there the broker's
async code hands each unit of store work (a batch of creates, a worker's reports, a
scheduling pass's binds) to `run`, which runs it in a worker thread, one unit at a time
(a limiter of one: the units never interleave, as they do not on the loop), while the
loop goes on answering.

A unit may read the store and write it; it must not touch the broker's in-memory
structures (the cluster view, the lease table, the work queues), which belong to the
loop's thread: its caller reads what it needs from them first, on the loop, and hands
copies in (a lookup by key of a bound job is the one read allowed: one dict access).
Listeners are the store's to run on the loop (sql/delivery.py): each commit of a unit
is heard on the loop, in commit order, before the caller resumes, so it resumes with
the view current with every commit the unit made, as it would inline.

A unit that decides from what the loop holds (a pass binding jobs into the free room the
view shows) reads it in `prepare`, run on the loop once the units before it have ended:
their commits have been heard by then, so two units that bind never both count the same
free slot (`run_prepared`).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Protocol, TypeVar, TypeVarTuple, Unpack

import anyio
import anyio.to_thread

__all__ = ["HasHome", "StoreRunner"]

T = TypeVar("T")
P = TypeVar("P")
Ts = TypeVarTuple("Ts")


class HasHome(Protocol):
    def listen_on_this_thread(self) -> None: ...


class StoreRunner:
    """Runs units of store work inline (`off_loop=False`) or on a thread of their own."""

    def __init__(self, store: HasHome, off_loop: bool) -> None:
        self.store = store
        self.off_loop = off_loop
        # The turn of units (one at a time, in order), and the thread they run on.
        self._limiter: anyio.Lock | None = None
        self._thread: anyio.CapacityLimiter | None = None

    async def run(self, unit: Callable[[Unpack[Ts]], T], *args: *Ts) -> T:
        """`unit(*args)`, inline or on the store's thread; its commits heard on the loop.

        Cancelled, a unit on the thread still runs to its end (a transaction is not cut
        in half), and the caller is cancelled after it.
        """
        if not self.off_loop:
            return unit(*args)
        async with self._turn():
            return await anyio.to_thread.run_sync(unit, *args, limiter=self._thread)

    async def run_prepared(self, prepare: Callable[[], P], unit: Callable[[P], T]) -> T:
        """`unit(prepare())`: `prepare` reads the loop's structures on the loop, when the
        units before this one have ended and their commits have been heard."""
        if not self.off_loop:
            return unit(prepare())
        async with self._turn():
            prepared = prepare()
            return await anyio.to_thread.run_sync(unit, prepared, limiter=self._thread)

    @contextlib.asynccontextmanager
    async def _turn(self) -> AsyncIterator[None]:
        if self._limiter is None:  # made on the loop, at its first use
            self.store.listen_on_this_thread()
            self._limiter = anyio.Lock()
            self._thread = anyio.CapacityLimiter(1)
        async with self._limiter:
            yield

    @contextlib.asynccontextmanager
    async def quiet(self) -> AsyncIterator[None]:
        """No unit runs on the store's thread inside: nothing commits but the loop.

        For the loop's own reads that must see no commit land between them (a cache
        reloaded from the store). Inline, nothing to wait for.
        """
        if self._limiter is None:
            yield
            return
        async with self._limiter:
            yield
