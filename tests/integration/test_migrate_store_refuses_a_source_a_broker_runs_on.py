"""`jobd migrate-store` refuses a source a broker still runs on (store/in_use.py), before
anything is written, with exit code 4 and a sentence that names what shows it.

SQLite: a real `jobd broker` has the file open (its lock on the `-shm` file names its
pid); once it stopped, the same command moves the store. PostgreSQL: a lease taken as a
broker's election takes it and not run out says a broker leads; `--force` copies anyway.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa

from jobd.store import normalize_url, open_store
from jobd.store.sql.leadership import LeaderLease
from tests.fuzz.broker import running_broker

BIN = Path(sys.executable).parent


def _migrate(source: str, target: str, *flags: str) -> subprocess.CompletedProcess[str]:
    command = [str(BIN / "jobd"), "migrate-store", "--from", source, "--to", target, *flags]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


def _tables(url: str) -> list[str]:
    engine = sa.create_engine(normalize_url(url), poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            return sa.inspect(conn).get_table_names()
    finally:
        engine.dispose()


@pytest.mark.postgres
def test_a_sqlite_store_a_broker_has_open_is_refused_until_it_stops(
    tmp_path: Path, postgres_url: str
) -> None:
    source = f"sqlite:///{tmp_path / 'data' / 'jobd.db'}"
    with running_broker(tmp_path) as broker:
        refused = _migrate(source, postgres_url)
        assert refused.returncode == 4, refused.stderr
        said = refused.stderr.strip()
        assert said.startswith(f"jobd: error: pid {broker.process.pid} (jobd broker"), said
        assert "a broker runs on it; stop it first" in said
        assert "--force" not in said, "a lock held is no lease that may have outlived its broker"
        assert _tables(postgres_url) == [], "nothing was written"
    moved = _migrate(source, postgres_url)
    assert moved.returncode == 0, moved.stderr
    assert "moved " in moved.stdout


@pytest.mark.postgres
def test_a_postgresql_store_whose_lease_runs_is_refused_unless_forced(
    tmp_path: Path, postgres_url: str
) -> None:
    open_store(postgres_url).close()  # a store at this jobd's schema, its lease free
    target = f"sqlite:///{tmp_path / 'moved.db'}"
    lease = LeaderLease(postgres_url, "broker-1", "http://10.0.0.5:8765", 60.0)
    try:
        assert lease.take() == 1  # as the broker's election takes it
        refused = _migrate(postgres_url, target)
        assert refused.returncode == 4, refused.stderr
        assert "the broker broker-1 (http://10.0.0.5:8765) leads on" in refused.stderr
        assert "or give --force if that broker is gone" in refused.stderr
        assert not (tmp_path / "moved.db").exists()
        forced = _migrate(postgres_url, target, "--force")
        assert forced.returncode == 0, forced.stderr
        assert "--force: copying although the broker broker-1" in forced.stderr
    finally:
        lease.close()


@pytest.mark.postgres
def test_a_lease_given_up_says_no_broker_leads(tmp_path: Path, postgres_url: str) -> None:
    open_store(postgres_url).close()
    lease = LeaderLease(postgres_url, "broker-1", "http://10.0.0.5:8765", 60.0)
    try:
        lease.release(lease.take() or 0)  # a broker that stopped gives its lease up
    finally:
        lease.close()
    moved = _migrate(postgres_url, f"sqlite:///{tmp_path / 'moved.db'}")
    assert moved.returncode == 0, moved.stderr
