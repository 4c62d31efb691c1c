"""Fair share's usage in the store: each project's and user's decayed usage, charged once
per run (controllers/fairshare.py says what the numbers mean)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import sqlalchemy as sa

from jobd.store import schema as t
from jobd.store.base import RunCharge, UsageRecord
from jobd.store.sql.cas import SQLCompareAndSwap

__all__ = ["SQLUsage"]


class SQLUsage(SQLCompareAndSwap):
    """The `usage` and `usage_charged` tables."""

    def list_usage(self) -> list[UsageRecord]:
        rows = self._rows(sa.select(t.usage).order_by(t.usage.c.project, t.usage.c.user))
        return [UsageRecord(r.project, r.user, r.value, r.at) for r in rows]

    def charge_usage(self, runs: Sequence[RunCharge], half_life_s: float) -> list[RunCharge]:
        """Charge the runs not charged before, in one transaction: each run's row in
        `usage_charged`, and one update per project and user however many runs."""
        if not runs:
            return []
        with self._tx() as tx:
            charged = _already_charged(tx.conn, runs)
            fresh = [r for r in runs if (r.job, r.attempt) not in charged]
            if fresh:
                rows = [{"job": r.job, "attempt": r.attempt} for r in fresh]
                tx.conn.execute(t.usage_charged.insert(), rows)
            for record in _summed(fresh, half_life_s):
                _add(tx.conn, record, half_life_s)
        return fresh

    def queued_projects(self) -> dict[int, str]:
        """The project of each ready queued job, off the index: no body is parsed."""
        c = t.jobs.c
        query = sa.select(c.id, c.project).where(c.phase == "Pending", c.ready == sa.true())
        return {int(row.id): row.project for row in self._rows(query)}


def _already_charged(conn: sa.Connection, runs: Sequence[RunCharge]) -> set[tuple[int, int]]:
    c = t.usage_charged.c
    found: set[tuple[int, int]] = set()
    jobs = sorted({r.job for r in runs})
    for i in range(0, len(jobs), 500):
        query = sa.select(c.job, c.attempt).where(c.job.in_(jobs[i : i + 500]))
        found.update((int(row.job), int(row.attempt)) for row in conn.execute(query))
    return found


def _summed(runs: Sequence[RunCharge], half_life_s: float) -> list[UsageRecord]:
    """The runs' charges summed per project (user "") and per (project, user), each as
    worth at the latest end among them (earlier ones decayed to it)."""
    ends: dict[tuple[str, str], float] = {}
    for run in runs:
        for key in _keys(run):
            ends[key] = max(ends.get(key, run.at), run.at)
    values: dict[tuple[str, str], float] = {}
    for run in runs:
        for key in _keys(run):
            worth = run.value * math.pow(2.0, -(ends[key] - run.at) / half_life_s)
            values[key] = values.get(key, 0.0) + worth
    return [UsageRecord(p, u, values[(p, u)], ends[(p, u)]) for p, u in values]


def _keys(run: RunCharge) -> list[tuple[str, str]]:
    return [(run.project, ""), (run.project, run.user)] if run.user else [(run.project, "")]


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
