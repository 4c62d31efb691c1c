"""The leader's lease on PostgreSQL: take it, renew it, give it up, and read who holds it.

One row (`leader_lease`, migration 0011) names the broker that leads, its advertised URL,
and an epoch raised by one at each election. Times are the database's own clock
(`clock_timestamp()`), so brokers whose hosts' clocks disagree agree on when a lease ran
out. The lease alone does not fence (a leader paused past its lease still believes it
leads): every write transaction of the leader checks its epoch in the store
(statements.py, `_EPOCH_HELD`), and an election's UPDATE of this row waits for the
transactions that hold it to end.

The lease has a connection of its own, apart from the store's pool, with short
timeouts: a renewal must never wait behind the store's work, nor hang on a database that
went away (it then fails, and the broker steps down once its renew deadline passed).
"""

from __future__ import annotations

from typing import NamedTuple

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from jobd.store import schema as t
from jobd.store.sql.engine import normalize_url

__all__ = ["LeaderLease", "LeaseHolder"]

_NOW = sa.func.extract("epoch", sa.func.clock_timestamp())
_ROW = t.leader_lease.c.id == 1
# Free (never held, or given up) or run out: the next epoch is the caller's.
_TAKE = (
    sa.update(t.leader_lease)
    .where(
        _ROW,
        sa.or_(
            t.leader_lease.c.holder == "",
            t.leader_lease.c.renewed_at + t.leader_lease.c.lease_s < _NOW,
        ),
    )
    .values(
        epoch=t.leader_lease.c.epoch + 1,
        holder=sa.bindparam("b_holder"),
        url=sa.bindparam("b_url"),
        renewed_at=_NOW,
        lease_s=sa.bindparam("b_lease_s"),
    )
    .returning(t.leader_lease.c.epoch)
)
_HELD_BY = sa.and_(
    _ROW,
    t.leader_lease.c.holder == sa.bindparam("b_holder"),
    t.leader_lease.c.epoch == sa.bindparam("b_epoch"),
)
_RENEW = sa.update(t.leader_lease).where(_HELD_BY).values(renewed_at=_NOW)
_RELEASE = sa.update(t.leader_lease).where(_HELD_BY).values(holder="", url="")
_READ = sa.select(
    t.leader_lease.c.epoch,
    t.leader_lease.c.holder,
    t.leader_lease.c.url,
    (t.leader_lease.c.renewed_at + t.leader_lease.c.lease_s - _NOW).label("left_s"),
).where(_ROW)


class LeaseHolder(NamedTuple):
    """Who the row says leads: `holder` "" when nobody does; `left_s` below 0 once run out."""

    epoch: int
    holder: str
    url: str
    left_s: float

    @property
    def live(self) -> bool:
        return bool(self.holder) and self.left_s > 0


class LeaderLease:
    """One broker's hand on the lease row: `holder` names this process, `url` its address."""

    def __init__(self, url: str, holder: str, advertise_url: str, lease_s: float) -> None:
        self.holder, self.advertise_url, self.lease_s = holder, advertise_url, lease_s
        self.engine = _lease_engine(url, timeout_s=min(lease_s / 3, 5.0))

    def take(self) -> int | None:
        """The new epoch when the lease was free or ran out; None when another holds it."""
        params = {"b_holder": self.holder, "b_url": self.advertise_url, "b_lease_s": self.lease_s}
        with self.engine.begin() as conn:
            epoch = conn.execute(_TAKE, params).scalar()
        return None if epoch is None else int(epoch)

    def renew(self, epoch: int) -> bool:
        """Still ours at `epoch`, for another lease; False when another broker took it."""
        with self.engine.begin() as conn:
            done = conn.execute(_RENEW, {"b_holder": self.holder, "b_epoch": epoch})
        return done.rowcount == 1

    def release(self, epoch: int) -> None:
        """Give the lease up now (a broker stopping), so a standby need not wait it out."""
        with self.engine.begin() as conn:
            conn.execute(_RELEASE, {"b_holder": self.holder, "b_epoch": epoch})

    def read(self) -> LeaseHolder:
        with self.engine.connect() as conn:
            row = conn.execute(_READ).one()
        return LeaseHolder(int(row.epoch), row.holder, row.url, float(row.left_s))

    def close(self) -> None:
        self.engine.dispose()


def _lease_engine(url: str, timeout_s: float) -> Engine:
    """One connection, whose statements and waits for a lock end after `timeout_s`.

    An election waits for the leader's write transactions that hold the row (the
    fence); a lock wait past the timeout fails the try, and the next retry tries again.
    A broker paused between a renewal's UPDATE and its COMMIT would hold the row until
    it wakes: the server ends such a transaction after the same time.
    """
    ms = max(int(timeout_s * 1000), 100)
    options = (
        f"-c statement_timeout={ms} -c lock_timeout={ms} "
        f"-c idle_in_transaction_session_timeout={ms}"
    )
    return sa.create_engine(
        normalize_url(url),
        pool_size=1,
        max_overflow=0,
        pool_pre_ping=True,
        connect_args={"connect_timeout": max(int(timeout_s), 1), "options": options},
    )
