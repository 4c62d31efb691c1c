"""The store fences the leader's writes by its epoch, in the writing transaction itself.

- An elected broker writes while its epoch is the lease row's; once another broker took
  the lease (a newer epoch), its next write is refused (NotLeader), nothing of it is
  committed, and the store tells who asked (`on_fenced_out`).
- A standby (`fence(0)`) is refused before anything is sent; an unfenced store (SQLite,
  `jobd token`) takes every write.
- An election waits for the leader's write transaction that holds the fence: no write of
  an older epoch commits after a newer epoch was taken.
- A lease is taken only when free or run out, renewed only by its holder at its epoch.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from jobd.api.models import ObjectMeta, Project
from jobd.store.base import NotLeader, StoreUnavailable
from jobd.store.sql import SQLStore
from jobd.store.sql.leadership import LeaderLease

pytestmark = pytest.mark.postgres


@pytest.fixture
def leases(postgres_url: str, pg_store: SQLStore) -> Iterator[tuple[LeaderLease, LeaderLease]]:
    """Two brokers' hands on the lease of `pg_store` (migrated: the row is there)."""
    a = LeaderLease(postgres_url, "broker-a", "http://a:8765", lease_s=1.0)
    b = LeaderLease(postgres_url, "broker-b", "http://b:8765", lease_s=1.0)
    try:
        yield a, b
    finally:
        a.close()
        b.close()


def _project(name: str) -> Project:
    return Project(metadata=ObjectMeta(name=name))


def test_a_lease_is_taken_when_free_or_run_out_and_renewed_by_its_holder(
    leases: tuple[LeaderLease, LeaderLease],
) -> None:
    a, b = leases
    assert a.take() == 1
    assert b.take() is None  # held, and not run out
    assert a.renew(1) and not b.renew(1)
    held = b.read()
    assert (held.epoch, held.holder, held.url) == (1, "broker-a", "http://a:8765")
    assert held.live
    time.sleep(1.2)
    assert not b.read().live
    assert b.take() == 2  # ran out: the next epoch is b's
    assert not a.renew(1)
    b.release(2)
    assert a.take() == 3  # given up: taken at once


def test_the_old_epochs_write_is_refused_and_nothing_of_it_committed(
    pg_store: SQLStore, leases: tuple[LeaderLease, LeaderLease]
) -> None:
    a, b = leases
    told: list[int] = []
    pg_store.on_fenced_out(told.append)
    pg_store.fence(a.take())
    pg_store.put_project(_project("first"))
    a.release(1)
    assert b.take() == 2
    revision = pg_store.revision()
    with pytest.raises(NotLeader):
        pg_store.put_project(_project("second"))
    assert pg_store.get_project("second") is None
    assert pg_store.revision() == revision
    assert told == [1]
    assert pg_store.write_error is None  # no storage fault: /readyz stays as it was
    with pytest.raises(NotLeader):  # writes that take no revision are fenced too
        pg_store.touch_tokens({"nobody": "2026-01-01T00:00:00Z"})
    pg_store.fence(2)
    pg_store.put_project(_project("second"))


def test_a_standby_is_refused_before_anything_is_sent_and_unfenced_takes_all(
    pg_store: SQLStore,
) -> None:
    pg_store._write_error = StoreUnavailable("a paused leader's transaction was ended")
    pg_store.fence(0)
    assert pg_store.write_error is None  # a standby's readiness: the store answers (ping)
    with pytest.raises(NotLeader):
        pg_store.put_project(_project("p"))
    pg_store.fence(None)
    pg_store.put_project(_project("p"))


def test_an_election_waits_for_the_leaders_open_write(
    pg_store: SQLStore, leases: tuple[LeaderLease, LeaderLease]
) -> None:
    a, b = leases
    pg_store.fence(a.take())
    time.sleep(1.1)  # a's lease ran out; a does not know yet
    took: list[int | Exception | None] = []
    with pg_store.batch(durable=True):
        pg_store.put_project(_project("in-flight"))  # holds the fence until the commit
        electing = threading.Thread(target=lambda: took.append(_try(b)))
        electing.start()
        electing.join()
    assert isinstance(took[0], sa.exc.OperationalError)  # waited, then gave up this try
    assert b.take() == 2  # the write committed first, under epoch 1
    assert pg_store.get_project("in-flight") is not None
    with pytest.raises(NotLeader):
        pg_store.put_project(_project("late"))


def _try(lease: LeaderLease) -> int | Exception | None:
    try:
        return lease.take()
    except Exception as exc:
        return exc
