"""Workers in the store: named objects, put by compare-and-swap with their events."""

from __future__ import annotations

from collections.abc import Iterable

import sqlalchemy as sa

from jobd.api.models import Worker
from jobd.store import schema as t
from jobd.store.base import EventRecord
from jobd.store.sql.cas import SQLCompareAndSwap

__all__ = ["SQLWorkers"]


class SQLWorkers(SQLCompareAndSwap):
    """The workers' table; a worker's writes are observations, not durable."""

    def put_worker(self, worker: Worker, events: Iterable[EventRecord] = ()) -> Worker:
        return self._put_named("Worker", t.workers, worker, events)

    def get_worker(self, name: str) -> Worker | None:
        rows = self._rows(sa.select(t.workers.c.body).where(t.workers.c.name == name))
        return Worker.model_validate_json(rows[0].body) if rows else None

    def list_workers(self) -> list[Worker]:
        rows = self._rows(sa.select(t.workers.c.body).order_by(t.workers.c.name))
        return [Worker.model_validate_json(row.body) for row in rows]
