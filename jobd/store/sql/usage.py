"""Fair share's usage in the store: each project's and user's decayed usage, charged once
per run (controllers/fairshare.py says what the numbers mean)."""

from __future__ import annotations

import math

import sqlalchemy as sa

from jobd.store import schema as t
from jobd.store.base import UsageRecord
from jobd.store.sql.cas import SQLCompareAndSwap

__all__ = ["SQLUsage"]


class SQLUsage(SQLCompareAndSwap):
    """The `usage` and `usage_charged` tables."""

    def list_usage(self) -> list[UsageRecord]:
        rows = self._rows(sa.select(t.usage).order_by(t.usage.c.project, t.usage.c.user))
        return [UsageRecord(r.project, r.user, r.value, r.at) for r in rows]

    def charge_usage(
        self, job: int, attempt: int, charges: list[UsageRecord], half_life_s: float
    ) -> bool:
        """Add each charge (its value, worth at its `at`) to the decayed usage of its
        project and user, once per (job, attempt): False when that run was charged."""
        with self._tx() as tx:
            run = {"job": job, "attempt": attempt}
            seen = (t.usage_charged.c.job == job) & (t.usage_charged.c.attempt == attempt)
            if tx.conn.execute(sa.select(t.usage_charged.c.job).where(seen)).first():
                return False
            tx.conn.execute(t.usage_charged.insert(), run)
            for charge in charges:
                _add(tx.conn, charge, half_life_s)
        return True

    def queued_projects(self) -> dict[int, str]:
        """The project of each ready queued job, off the index: no body is parsed."""
        c = t.jobs.c
        query = sa.select(c.id, c.project).where(c.phase == "Pending", c.ready == sa.true())
        return {int(row.id): row.project for row in self._rows(query)}


def _add(conn: sa.Connection, charge: UsageRecord, half_life_s: float) -> None:
    key = (t.usage.c.project == charge.project) & (t.usage.c.user == charge.user)
    row = conn.execute(sa.select(t.usage.c.value, t.usage.c.at).where(key)).first()
    if row is None:
        values = {"project": charge.project, "user": charge.user}
        conn.execute(t.usage.insert(), {**values, "value": charge.value, "at": charge.at})
        return
    since = charge.at - row.at
    value = row.value * math.pow(2.0, -since / half_life_s) if since > 0 else row.value
    at = max(row.at, charge.at)
    conn.execute(sa.update(t.usage).where(key).values(value=value + charge.value, at=at))
