"""The agents' receipts in the store: the last request of each kind each worker had applied.

A worker's reports and events travel one request at a time per kind, each numbered within
the agent's run (worker/reporting.py). The broker applies a request and keeps its receipt
in the same transaction (broker/routes/workers.py), so after a failover the leader knows
whether a request sent again was applied — by itself or by the broker that died before
answering — and answers it again instead of applying it twice.
"""

from __future__ import annotations

import sqlalchemy as sa

from jobd.store import schema as t
from jobd.store.base import Receipt
from jobd.store.sql.cas import SQLCompareAndSwap

__all__ = ["SQLReceipts"]

_COLUMNS = (t.receipts.c.run, t.receipts.c.seq, t.receipts.c.answer)


class SQLReceipts(SQLCompareAndSwap):
    """The `receipts` table: one row per worker and stream, replaced at each request."""

    def receipt_of(self, worker: str, stream: str) -> Receipt | None:
        """The receipt, read in the open batch's transaction when there is one."""
        query = sa.select(*_COLUMNS).where(_key(worker, stream))
        if self._batch is not None:
            row = self._batch.conn.execute(query).first()
        else:
            row = next(iter(self._rows(query)), None)
        if row is None:
            return None
        return Receipt(worker, stream, row.run, int(row.seq), row.answer)

    def keep_receipt(self, receipt: Receipt) -> None:
        """Replace the worker's receipt of that stream, in the open batch when there is one."""
        values = {"run": receipt.run, "seq": receipt.seq, "answer": receipt.answer}
        with self._tx() as tx:
            where = _key(receipt.worker, receipt.stream)
            updated = tx.conn.execute(sa.update(t.receipts).where(where).values(**values))
            if updated.rowcount == 0:
                key = {"worker": receipt.worker, "stream": receipt.stream}
                tx.conn.execute(t.receipts.insert().values(**key, **values))


def _key(worker: str, stream: str) -> sa.ColumnElement[bool]:
    return (t.receipts.c.worker == worker) & (t.receipts.c.stream == stream)
