"""On PostgreSQL the store spends round trips only where they buy something.

- Reads run each statement as its own transaction: no BEGIN, no ROLLBACK around them.
- A write waits for the WAL's flush only when it is durable (what a user was told is
  accepted); an observation commits with `synchronous_commit` off, as it runs with
  SQLite's NORMAL. The session's level is remembered only once committed: a durable
  write after a rolled-back one still waits for the flush.
- A pooled connection is pinged only after it sat idle: one the server dropped while
  idle is replaced before use, one in steady use is not asked first.
"""

from __future__ import annotations

import psycopg
import pytest
import sqlalchemy as sa

from jobd.api.models import ObjectMeta, Project
from jobd.store.sql import SQLStore, normalize_url
from jobd.store.sql.engine import ping_when_idle

pytestmark = pytest.mark.postgres


def _level_inside(store: SQLStore, durable: bool) -> str:
    with store._tx(durable) as tx:
        return str(tx.conn.exec_driver_sql("SHOW synchronous_commit").scalar_one())


def test_only_durable_writes_wait_for_the_flush(pg_store: SQLStore) -> None:
    assert _level_inside(pg_store, durable=False) == "off"
    assert _level_inside(pg_store, durable=True) == "on"
    assert _level_inside(pg_store, durable=False) == "off"
    created = pg_store.put_project(Project(metadata=ObjectMeta(name="kept")))  # durable
    assert created.metadata.resource_version is not None
    assert _level_inside(pg_store, durable=True) == "on"


def test_a_rolled_back_set_is_set_again(pg_store: SQLStore) -> None:
    assert _level_inside(pg_store, durable=False) == "off"
    with pytest.raises(RuntimeError, match="rolled back"), pg_store._tx(durable=True):
        raise RuntimeError("rolled back, and the SET with it")
    assert _level_inside(pg_store, durable=True) == "on"


def test_a_read_opens_no_transaction(pg_store: SQLStore) -> None:
    with pg_store.reads.connect() as conn:
        conn.execute(sa.text("SELECT 1"))
        raw = conn.connection.dbapi_connection
        assert isinstance(raw, psycopg.Connection)
        assert raw.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


def _backend_pid(engine: sa.Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.text("SELECT pg_backend_pid()")).scalar_one())


def _terminate(url: str, pid: int) -> None:
    admin = sa.create_engine(normalize_url(url), poolclass=sa.pool.NullPool)
    with admin.connect() as conn:
        conn.execute(sa.text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
    admin.dispose()


@pytest.mark.parametrize("idle_s", [0.0, 3600.0], ids=["idle", "in-use"])
def test_a_dropped_connection_is_replaced_only_after_idling(
    postgres_url: str, idle_s: float
) -> None:
    engine = sa.create_engine(normalize_url(postgres_url), pool_size=1)
    ping_when_idle(engine, idle_s)
    try:
        dropped = _backend_pid(engine)
        _terminate(postgres_url, dropped)
        if idle_s:  # in steady use, not asked: the next statement finds it gone, once
            with pytest.raises(sa.exc.OperationalError):
                _backend_pid(engine)
        assert _backend_pid(engine) != dropped
    finally:
        engine.dispose()
