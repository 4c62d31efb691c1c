"""The agents' receipts in the store: the last request of each kind each worker had applied.

A worker's reports and events travel one request at a time per kind, each numbered within
the agent's run (worker/reporting.py). The broker claims a request's delivery in the
transaction that applies it (broker/routes/workers.py), so after a failover the leader
knows whether a request sent again was applied — by itself or by a broker that died
before answering — and acknowledges it instead of applying it twice.

The claim is one statement, compiled once and run on the transaction's own cursor as the
hot writes are (statements.py): an upsert whose update applies only when the request is
past the recorded one, so its row count says new (1) or applied before (0). A report
batch pays that one round trip for being safe to send again.
"""

from __future__ import annotations

from functools import cached_property

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from jobd.store import schema as t
from jobd.store.base import Receipt
from jobd.store.sql.cas import SQLCompareAndSwap
from jobd.store.sql.statements import Compiled

__all__ = ["SQLReceipts"]


class SQLReceipts(SQLCompareAndSwap):
    """The `receipts` table: one row per worker and stream, moved on at each request."""

    def claim_delivery(self, worker: str, stream: str, run: str, seq: int) -> bool:
        """Record that request `seq` of the agent's `run` is applied, in the open batch's
        transaction (or one of its own); False, recording nothing, when it was already."""
        row = {"worker": worker, "stream": stream, "run": run, "seq": seq}
        with self._tx() as tx:
            return bool(tx.run(self._claim, row).rowcount)

    def receipt_of(self, worker: str, stream: str) -> Receipt | None:
        key = (t.receipts.c.worker == worker) & (t.receipts.c.stream == stream)
        rows = self._rows(sa.select(t.receipts.c.run, t.receipts.c.seq).where(key))
        return Receipt(worker, stream, rows[0].run, int(rows[0].seq)) if rows else None

    @cached_property
    def _claim(self) -> Compiled:
        dialect = self.engine.dialect
        insert = (postgresql.insert if dialect.name == "postgresql" else sqlite.insert)(t.receipts)
        new, kept = insert.excluded, t.receipts.c
        claim = insert.on_conflict_do_update(
            index_elements=[kept.worker, kept.stream],
            set_={"run": new.run, "seq": new.seq},
            where=sa.not_((kept.run == new.run) & (kept.seq >= new.seq)),
        )
        return Compiled(claim, dialect)
