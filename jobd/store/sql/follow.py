"""Following the store: what other brokers commit, heard in revision order with one's own.

Several brokers may share one PostgreSQL store (a leader and its standbys). Each hears
its own commits from its write path (engine.py); what another commits it learns here:
every commit that adds to `changes` NOTIFYs `CHANNEL` with its newest revision (the
trigger of migration 0010, in the writer's transaction, so the notification leaves
with the commit and only with it). `ChangeSignal` LISTENs on a connection of its own
and says which revision was notified; `follow` then reads `changes` after the revision
this store last heard and queues them for the listeners, under the write lock, so the
listeners hear one sequence in revision order, each change once, whoever made it.

A commit of this store's own whose first revision is past the one after the newest
heard (a standby that has just become leader, before its follower read the old
leader's last commits) first queues the changes in between, read after its commit
under the same lock: revisions are taken in commit order (the counter's row stays
locked until the commit), so every revision below its own is committed by then.

A notification can be lost with the LISTEN connection; the caller then reads from
the revision it heard once it listens again, and every few seconds without one
(broker/streams/following.py). A revision compacted away before it was read raises
`Gone` from `follow`: the caller rebuilds what it keeps from the store.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import anyio
import psycopg

from jobd.store.base import Change, EventRecord, Gone, StoreUnavailable
from jobd.store.faults import storage_fault
from jobd.store.sql.changes import SQLChanges

__all__ = ["CHANNEL", "FOLLOW_PAGE", "ChangeSignal", "SQLFollow"]

CHANNEL = "jobd_changes"  # migration 0010's trigger notifies it (it keeps its own copy)
FOLLOW_PAGE = 1000  # changes read at a time
_CHECK_S = 5.0  # a LISTEN connection that does not answer this soon is taken as lost
_KEEPALIVES = {"connect_timeout": 5, "keepalives_idle": 5, "keepalives_interval": 2}


class SQLFollow(SQLChanges):
    """The revision heard last, and the reads that hear what others committed after it."""

    _heard = 0
    _follows = False
    _lost: str | None = None  # why a gap could not be read: `follow` raises Gone

    def follow_from(self, revision: int) -> None:
        """Follow from now on, having heard everything up to `revision`."""
        with self._lock:
            self._heard, self._follows, self._lost = revision, True, None

    @property
    def heard(self) -> int:
        return self._heard

    def change_signal(self) -> AbstractAsyncContextManager[ChangeSignal]:
        """A LISTEN connection of its own (PostgreSQL only), made as the pool's are."""
        _args, params = self.engine.dialect.create_connect_args(self.engine.url)
        params.pop("context", None)  # the pool's adapters; psycopg's own do for LISTEN
        # A server that vanished from the network is noticed in seconds, not minutes.
        for key, value in _KEEPALIVES.items():
            params.setdefault(key, value)
        return listening(params, self.where)

    def follow(self, notified: int | None = None, limit: int = FOLLOW_PAGE) -> int:
        """Queue the changes after the revision heard, in order, and deliver them.

        `notified`: the newest revision a notification named; nothing is read when that
        was heard already (this store's own commit). At most `limit` are read, so the
        write lock is held for one page: returns how many, and `limit` means more may
        be waiting.
        """
        with self._lock:
            if self._lost is not None:  # until `follow_from` starts afresh
                raise Gone(self._lost)
            if notified is not None and notified <= self._heard:
                return 0
            found = self.changes_since(self._heard, limit)
            self._queue_followed(found)
        self._delivery.deliver()
        return len(found)

    def _read_after(self, revision: int, before: int) -> list[Change]:
        """Every change after `revision` and below `before`, page by page."""
        found: list[Change] = []
        while True:
            page = self.changes_since(revision, FOLLOW_PAGE)
            page = [change for change in page if change.revision < before]
            found += page
            if len(page) < FOLLOW_PAGE:
                return found
            revision = page[-1].revision

    def _queue_followed(self, changes: Sequence[Change]) -> None:
        if changes:
            self._delivery.committed(changes, ())
            self._heard = changes[-1].revision

    def _queue_commit(self, changes: list[Change], events: list[EventRecord]) -> None:
        if self._follows and changes:
            first = min(change.revision for change in changes)
            if first > self._heard + 1:
                self._fill_gap(first)
            self._heard = max(self._heard, changes[-1].revision)
        super()._queue_commit(changes, events)

    def _fill_gap(self, first: int) -> None:
        """Queue what others committed between the revision heard and `first`.

        Runs after a commit, which must not fail now: a gap that cannot be read is
        left for `follow` to report as Gone, and its caller rebuilds.
        """
        try:
            self._queue_followed(self._read_after(self._heard, first))
        except (Gone, StoreUnavailable) as exc:
            self._lost = f"changes before revision {first} could not be read: {exc}"


class ChangeSignal:
    """A connection of its own, LISTENing on CHANNEL: the newest revision notified."""

    def __init__(self, conn: psycopg.AsyncConnection[Any], where: str) -> None:
        self._conn = conn
        self._where = where

    async def wait(self, timeout_s: float) -> int | None:
        """The newest revision notified within `timeout_s`, or None when none came.

        With none, the connection is asked a `SELECT 1`: one the server or the network
        dropped raises StoreUnavailable here, not silence for ever.
        """
        newest: int | None = None
        try:
            async for note in self._conn.notifies(timeout=timeout_s, stop_after=1):
                revision = int(note.payload) if note.payload.isdigit() else 0
                newest = max(newest or 0, revision)
            if newest is None:
                with anyio.fail_after(_CHECK_S):
                    await self._conn.execute("SELECT 1")
        except (psycopg.Error, TimeoutError) as exc:
            raise _unreachable(exc, self._where) from exc
        return newest


@asynccontextmanager
async def listening(connect_args: Mapping[str, Any], where: str) -> AsyncIterator[ChangeSignal]:
    """A ChangeSignal on a new connection made with the store's own connect arguments
    (the same hosts, `target_session_attrs` and the rest of the URL)."""
    try:
        conn = await psycopg.AsyncConnection.connect(autocommit=True, **connect_args)
    except psycopg.Error as exc:
        raise _unreachable(exc, where) from exc
    try:
        await conn.execute(f"LISTEN {CHANNEL}")
        yield ChangeSignal(conn, where)
    except psycopg.Error as exc:
        raise _unreachable(exc, where) from exc
    finally:
        with anyio.CancelScope(shield=True):
            await conn.close()


def _unreachable(exc: BaseException, where: str) -> StoreUnavailable:
    fault = storage_fault(exc, where, "read")
    return fault or StoreUnavailable(f"the store at {where} could not be reached: {exc}")
