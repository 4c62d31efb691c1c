"""The change feed in the store: what changed after a revision, and its compaction.

Every write appends its changes in its own transaction (statements.py, `Tx.record`);
this module reads them back for watchers that fell behind the broker's in-memory tail,
and drops all but the newest, as etcd compacts its history.
"""

from __future__ import annotations

import sqlalchemy as sa

from jobd.api.models import Job, Project, Worker
from jobd.store import schema as t
from jobd.store.base import Change, Gone
from jobd.store.sql.engine import SQLEngine

__all__ = ["SQLChanges"]

_MODELS: dict[str, type[Job] | type[Project] | type[Worker]] = {
    "Job": Job,
    "Project": Project,
    "Worker": Worker,
}


class SQLChanges(SQLEngine):
    """The changes' table: read after a revision; compacted."""

    def changes_since(self, revision: int, limit: int = 1000) -> list[Change]:
        oldest = self._rows(sa.select(sa.func.min(t.changes.c.revision)))[0][0]
        if oldest is None:  # none kept (all compacted): the next change will be the oldest
            oldest = self.revision() + 1
        if revision + 1 < oldest:
            raise Gone(f"revision {revision} has been compacted; the oldest kept is {oldest}")
        q = (
            sa.select(t.changes)
            .where(t.changes.c.revision > revision)
            .order_by(t.changes.c.revision)
            .limit(limit)
        )
        return [
            Change(
                int(r.revision),
                r.kind,
                r.op,
                r.key,
                _MODELS[r.kind].model_validate_json(r.body),
                r.body,
            )
            for r in self._rows(q)
        ]

    def compact(self, keep: int) -> int:
        """Drop all but the newest `keep` changes; returns how many went."""
        with self._lock, self._writing(durable=False) as tx:
            conn = tx.conn
            newest = conn.execute(sa.select(sa.func.max(t.changes.c.revision))).scalar()
            if newest is None:
                return 0
            result = conn.execute(sa.delete(t.changes).where(t.changes.c.revision <= newest - keep))
            return int(result.rowcount)
