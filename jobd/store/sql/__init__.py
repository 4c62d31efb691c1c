"""The Store on SQLAlchemy Core: one implementation for SQLite and PostgreSQL.

Each write runs in one transaction: bump the global revision, compare-and-swap the row on
its old resource_version, append the change to the feed and the events it justifies.
Listeners hear of the change only after the commit (engine.py).

A module per resource, each a mixin over one engine (engine.py) and its transaction
(statements.py): jobs, arrays, projects, workers, tokens, changes (the feed and its
compaction), follow (other brokers' commits, heard), events, the agents' receipts, and
maintenance (migrations, health, the WAL's copy). `SQLStore` composes them, so a caller
holds one object and calls `store.get_job(...)`.
"""

from __future__ import annotations

from pathlib import Path

from jobd.store.sql.arrays import SQLArrays
from jobd.store.sql.engine import normalize_url
from jobd.store.sql.events import SQLEvents
from jobd.store.sql.follow import SQLFollow
from jobd.store.sql.jobs import random_uuids
from jobd.store.sql.maintenance import PROBE_FREE_BYTES, SQLMaintenance
from jobd.store.sql.projects import SQLProjects
from jobd.store.sql.receipts import SQLReceipts
from jobd.store.sql.statements import Tx
from jobd.store.sql.tokens import SQLTokens
from jobd.store.sql.usage import SQLUsage
from jobd.store.sql.workers import SQLWorkers

__all__ = [
    "PROBE_FREE_BYTES",
    "SQLStore",
    "normalize_url",
    "open_store",
    "random_uuids",
    "sqlite_url",
]

_Tx = Tx  # the transaction's class, by the name tests patch it under (tests/conftest.py)


class SQLStore(
    SQLArrays,
    SQLProjects,
    SQLWorkers,
    SQLTokens,
    SQLFollow,
    SQLEvents,
    SQLMaintenance,
    SQLUsage,
    SQLReceipts,
):
    """Store implementation over any SQLAlchemy engine (SQLite file or PostgreSQL)."""


def open_store(url: str) -> SQLStore:
    """A migrated store, ready to use."""
    store = SQLStore(url)
    store.migrate()
    return store


def sqlite_url(data_dir: Path) -> str:
    return f"sqlite:///{data_dir / 'jobd.db'}"
