"""Compare-and-swap writes every resource shares: put a named object, delete one.

Kubernetes keeps its generic storage apart from each resource's strategy; this is the
generic part of jobd's. A write names the resource_version it read: when the row has
moved on, nothing is written and the caller hears Conflict (or NotFound, if it is gone).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from jobd.api.models import Job, Project, Worker, utcnow
from jobd.store.base import Conflict, EventRecord, Kind, NotFound, Op
from jobd.store.sql.engine import SQLEngine
from jobd.store.sql.statements import Tx, to_json

__all__ = ["SQLCompareAndSwap"]

_Named = TypeVar("_Named", Project, Worker)


class SQLCompareAndSwap(SQLEngine):
    """The compare-and-swap put and delete of the resources' modules."""

    def _delete(
        self, tx: Tx, kind: Kind, key: sa.Column[Any], value: object, obj: Job | Project
    ) -> None:
        """Compare-and-swap delete; the change feed hears the last version."""
        tx.flush()  # a job's newest version, if this transaction holds one unwritten
        rev = tx.next_revision()
        table = key.table
        result = tx.conn.execute(
            sa.delete(table).where(
                key == value, table.c.resource_version == obj.metadata.resource_version
            )
        )
        if result.rowcount != 1:
            exists = tx.conn.execute(sa.select(key).where(key == value)).first() is not None
            raise self._stale(kind.lower(), value, exists)
        tx.record(kind, "DELETED", obj, rev)

    @staticmethod
    def _stale(kind: str, key: object, exists: bool) -> Exception:
        if exists:
            return Conflict(f"{kind} {key} was changed by someone else; read it again and retry")
        return NotFound(f"{kind} {key} not found")

    def _put_named(
        self,
        kind: Kind,
        table: sa.Table,
        obj: _Named,
        events: Iterable[EventRecord],
        durable: bool = False,
    ) -> _Named:
        """Create when resource_version is None, else compare-and-swap."""
        obj = obj.model_copy(update={"metadata": obj.metadata.model_copy()})
        name, expected = obj.name, obj.metadata.resource_version
        with self._tx(durable) as tx:
            rev = tx.next_revision()
            obj.metadata.resource_version = rev
            if expected is None:
                obj.metadata.uid = obj.metadata.uid or str(uuid.uuid4())
                obj.metadata.created_at = obj.metadata.created_at or utcnow()
                obj.metadata.generation = max(obj.metadata.generation, 1)
                row = _named_row(obj)
                try:
                    tx.conn.execute(sa.insert(table).values(**row))
                except IntegrityError:
                    raise Conflict(f"{kind.lower()} {name} already exists") from None
                op: Op = "ADDED"
            else:
                row = _named_row(obj)
                result = tx.conn.execute(
                    sa.update(table)
                    .where(table.c.name == name, table.c.resource_version == expected)
                    .values(**row)
                )
                if result.rowcount != 1:
                    raise Conflict(f"{kind.lower()} {name} was changed by someone else; retry")
                op = "MODIFIED"
            tx.record(kind, op, obj, rev, row["body"])
            tx.add_events(events)
        return obj


def _named_row(obj: Project | Worker) -> dict[str, Any]:
    return {
        "name": obj.name,
        "resource_version": obj.metadata.resource_version,
        "body": to_json(obj),
    }
