"""Persistence: the Store protocol and its SQL implementation (SQLite, PostgreSQL)."""

from jobd.store.base import (
    Change,
    Conflict,
    EventRecord,
    Fits,
    Gone,
    NotFound,
    StorageFull,
    Store,
    StoreUnavailable,
    TokenRecord,
)
from jobd.store.sql import SQLStore, normalize_url, open_store, sqlite_url

__all__ = [
    "Change",
    "Conflict",
    "EventRecord",
    "Fits",
    "Gone",
    "NotFound",
    "SQLStore",
    "StorageFull",
    "Store",
    "StoreUnavailable",
    "TokenRecord",
    "normalize_url",
    "open_store",
    "sqlite_url",
]
