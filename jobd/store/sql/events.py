"""The event record in the store: appended with the commit that justifies it, and read."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping

import sqlalchemy as sa

from jobd.store import schema as t
from jobd.store.base import EventRecord
from jobd.store.sql.engine import SQLEngine

__all__ = ["SQLEvents"]


class SQLEvents(SQLEngine):
    """The events' table: appended alone (a worker's events) or with a write; read by seq."""

    def append_events(self, events: Iterable[EventRecord]) -> None:
        with self._tx() as tx:
            tx.add_events(events)

    def list_events(
        self,
        *,
        job: int | None = None,
        event: str | None = None,
        after_seq: int = 0,
        limit: int = 1000,
        projects: Iterable[str] | None = None,
    ) -> list[EventRecord]:
        q = sa.select(t.events).where(t.events.c.seq > after_seq)
        if projects is not None:  # the events of these projects' jobs, and no other
            in_projects = sa.select(t.jobs.c.id).where(t.jobs.c.project.in_(list(projects)))
            q = q.where(t.events.c.job.in_(in_projects))
        if job is not None:
            q = q.where(t.events.c.job == job)
        if event is not None:
            q = q.where(t.events.c.event == event)
        q = q.order_by(t.events.c.seq).limit(limit)
        return [
            EventRecord(r.event, r.job, r.worker, json.loads(r.body), r.ts, int(r.seq))
            for r in self._rows(q)
        ]

    def last_event_seq(self) -> int:
        """The newest event's seq (0 for none): where a follower of new events starts."""
        rows = self._rows(sa.select(sa.func.max(t.events.c.seq)))
        return int(rows[0][0] or 0) if rows else 0

    def raise_counters(self, floors: Mapping[str, int]) -> dict[str, int]:
        """Counters (`job_id`, `event_seq`) raised to at least `floors`, durably.

        Returns the old value of each counter raised. For a store younger than what
        it already numbered (a SQLite file deleted under the broker): see eventlog.py.
        """
        raised: dict[str, int] = {}
        with self._lock, self._writing(durable=True) as tx:
            conn = tx.conn
            for key, floor in floors.items():
                row = t.meta.c.key == key
                value = int(conn.execute(sa.select(t.meta.c.value).where(row)).scalar_one())
                if value < floor:
                    conn.execute(sa.update(t.meta).where(row).values(value=floor))
                    raised[key] = value
        return raised
