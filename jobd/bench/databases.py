"""Where a bench broker keeps its store: a SQLite file, or a fresh PostgreSQL database.

`JOBD_BENCH_DB=postgresql://user@host:5432/db` makes every broker the bench starts use
PostgreSQL: each scenario gets a database of its own on that server, created empty and
dropped when the scenario ends, so runs never see each other's jobs.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator

import sqlalchemy as sa
from sqlalchemy.engine import make_url

from jobd.store import normalize_url

__all__ = ["BENCH_DB_ENV", "backend_of", "bench_db", "fresh_database"]

BENCH_DB_ENV = "JOBD_BENCH_DB"


def bench_db() -> str | None:
    """The PostgreSQL server the bench was told to use, if any."""
    return os.environ.get(BENCH_DB_ENV) or None


def backend_of(url: str | None) -> str:
    return "sqlite" if url is None else make_url(normalize_url(url)).get_backend_name()


@contextlib.contextmanager
def fresh_database(server: str, scenario: str) -> Iterator[str]:
    """The URL of a new, empty database on `server` for one scenario; dropped afterwards."""
    name = f"jobd_bench_{scenario}_{secrets.token_hex(4)}"
    admin = sa.create_engine(
        normalize_url(server), isolation_level="AUTOCOMMIT", poolclass=sa.pool.NullPool
    )
    try:
        with admin.connect() as conn:
            conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
        try:
            yield make_url(server).set(database=name).render_as_string(hide_password=False)
        finally:
            with admin.connect() as conn:
                conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        admin.dispose()
