"""Bearer tokens in the store: their digests, outside the revision and the change feed."""

from __future__ import annotations

import json

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from jobd.store import schema as t
from jobd.store.base import Conflict, NotFound, TokenRecord
from jobd.store.sql.engine import SQLEngine

__all__ = ["SQLTokens"]


class SQLTokens(SQLEngine):
    """The tokens' table: written durably, read whole (the broker keeps it in memory)."""

    def create_token(self, record: TokenRecord) -> None:
        row = {
            "label": record.label,
            "digest": record.digest,
            "role": record.role,
            "projects": json.dumps(list(record.projects)),
            "worker": record.worker,
            "user": record.user,
            "created_at": record.created_at,
            "last_used_at": record.last_used_at,
        }
        try:
            with self._lock, self._writing(durable=True) as tx:
                conn = tx.conn
                conn.execute(sa.insert(t.tokens).values(row))
        except IntegrityError:
            raise Conflict(f"a token labelled {record.label!r} exists") from None

    def list_tokens(self) -> list[TokenRecord]:
        rows = self._rows(sa.select(t.tokens).order_by(t.tokens.c.label))
        return [
            TokenRecord(
                label=row.label,
                digest=row.digest,
                role=row.role,
                projects=tuple(json.loads(row.projects)),
                worker=row.worker,
                created_at=row.created_at,
                last_used_at=row.last_used_at,
                user=row.user,
            )
            for row in rows
        ]

    def delete_token(self, label: str) -> None:
        with self._lock, self._writing(durable=True) as tx:
            conn = tx.conn
            deleted = conn.execute(sa.delete(t.tokens).where(t.tokens.c.label == label))
        if deleted.rowcount == 0:
            raise NotFound(f"no token is labelled {label!r}")

    def touch_tokens(self, last_used: dict[str, str]) -> None:
        if not last_used:
            return
        statement = (
            sa.update(t.tokens)
            .where(t.tokens.c.label == sa.bindparam("b_label"))
            .values(last_used_at=sa.bindparam("b_used"))
        )
        rows = [{"b_label": label, "b_used": used} for label, used in last_used.items()]
        with self._lock, self._writing(durable=False) as tx:
            conn = tx.conn
            conn.execute(statement, rows)
