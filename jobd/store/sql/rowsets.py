"""Many rows in one PostgreSQL statement: each column sent as an array, unnested by the server.

On PostgreSQL each statement is a trip through psycopg and the server's executor, and the
change feed's trigger (migration 0012) fires once per INSERT statement: an `executemany`
of twenty changes ran it, and its NOTIFY, twenty times. A transaction's flush
(statements.py) writes each table's rows here as one statement whose SQL text is the same
however many rows it carries, so psycopg prepares it once. The job rows' UPDATE keeps the
compare-and-swap's guard (`id` and the `resource_version` the row holds) and fails the
statement, so the transaction, when a row was not where it was expected: those rows are
locked by the transaction, so that is a fault of jobd's, never a race lost.

engine.py (`_end_transaction`) sends them and the COMMIT: a round trip each, whatever the
transaction wrote. SQLite keeps `executemany`, which costs it nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from jobd.store import schema as t

__all__ = ["HELD_ROW_MOVED", "RowSet", "RowSets"]

# The SQLSTATE the job rows' UPDATE raises (division_by_zero) when it wrote fewer rows
# than it was handed; engine.py turns it back into the RuntimeError it means.
HELD_ROW_MOVED = "22012"


class RowSet:
    """One statement over rows given as a column array each (`params`)."""

    def __init__(self, sql: str, columns: Sequence[str]) -> None:
        self.sql = sql
        self.columns = tuple(columns)

    def params(self, rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
        found = {name: [row[name] for row in rows] for name in self.columns}
        return found | {"n": len(rows)}


def _arrays(dialect: sa.Dialect, columns: Sequence[tuple[str, sa.Column[Any]]]) -> str:
    """`unnest(%(a)s::TYPE[], ...)`: the parameters' arrays as rows of the columns' types."""
    casts = [f"%({name})b::{column.type.compile(dialect)}[]" for name, column in columns]
    return f"unnest({', '.join(casts)})"


def _insert(dialect: sa.Dialect, table: sa.Table) -> RowSet:
    names = [c.name for c in table.columns]
    sql = (
        f"INSERT INTO {table.name} ({', '.join(names)}) "
        f"SELECT * FROM {_arrays(dialect, [(c.name, c) for c in table.columns])}"
    )
    return RowSet(sql, names)


def _update_jobs(dialect: sa.Dialect) -> RowSet:
    """Each job's row from the version it holds (`expected_rv`) to the one given; fails,
    dividing by zero, unless every row was written."""
    table = t.jobs
    written = [c for c in table.columns if c.name != "id"]
    keys = [("b_id", table.c.id), ("expected_rv", table.c.resource_version)]
    columns = keys + [(c.name, c) for c in written]
    names = ", ".join(name for name, _ in columns)
    sets = ", ".join(f"{c.name} = v.{c.name}" for c in written)
    sql = (
        f"WITH v AS (SELECT * FROM {_arrays(dialect, columns)} AS v({names})), "
        f"u AS (UPDATE {table.name} SET {sets} FROM v "
        f"WHERE {table.name}.id = v.b_id AND {table.name}.resource_version = v.expected_rv "
        f"RETURNING {table.name}.id) "
        "SELECT 1 / (CASE WHEN count(*) = %(n)s THEN 1 ELSE 0 END) FROM u"
    )
    return RowSet(sql, [name for name, _ in columns])


class RowSets:
    """PostgreSQL's statements of many rows: the jobs created, the flush's job rows, change
    feed and events."""

    def __init__(self, dialect: sa.Dialect) -> None:
        self.insert_jobs = _insert(dialect, t.jobs)
        self.update_jobs = _update_jobs(dialect)
        self.insert_changes = _insert(dialect, t.changes)
        self.insert_events = _insert(dialect, t.events)
