"""A SQLite store checks that its file is still the one it opened, and whole (storefile.py).

Real files under a real store: moved away, replaced, truncated, or not a database at all.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from jobd.broker.streams.eventlog import highest_ids
from jobd.store.base import EventRecord, StoreUnavailable
from jobd.store.sql import SQLStore, open_store, sqlite_url
from jobd.store.sql.storefile import StoreFileLost


def _store(root: Path) -> SQLStore:
    return open_store(sqlite_url(root))


def _write(store: SQLStore) -> None:
    store.append_events([EventRecord("job_started", 1, "w1")])


def test_a_replaced_file_refuses_every_write_and_sets_write_error(tmp_path: Path) -> None:
    store = _store(tmp_path)
    try:
        _write(store)
        db = tmp_path / "jobd.db"
        os.rename(db, tmp_path / "moved.db")
        (tmp_path / "other.db").write_bytes(b"x" * 4096)
        os.rename(tmp_path / "other.db", db)
        with pytest.raises(StoreFileLost, match="was replaced"):
            _write(store)
        assert isinstance(store.write_error, StoreFileLost)
        with pytest.raises(StoreFileLost):
            store.probe_write()  # the storage watch's probe does not clear it
        assert store.ping()  # reads still answer, from the file opened
    finally:
        store.close()


def test_a_truncated_file_is_seen_by_the_checkpoint_and_cut_back_at_close(
    tmp_path: Path,
) -> None:
    store = _store(tmp_path)
    db = tmp_path / "jobd.db"
    try:
        _write(store)
        os.truncate(db, 0)
        with pytest.raises(StoreFileLost, match="truncated to 0 bytes"):
            store.checkpoint()
        assert store.write_error is not None  # /readyz fails without a write
    finally:
        store.close()
    assert db.stat().st_size == 0  # closing copied nothing into it
    with pytest.raises(StoreUnavailable, match="is truncated"):
        _store(tmp_path)


def test_a_file_that_is_no_database_is_refused_at_open(tmp_path: Path) -> None:
    (tmp_path / "jobd.db").write_bytes(b"not a database" * 100)
    with pytest.raises(StoreUnavailable, match="is damaged: file is not a database"):
        _store(tmp_path)


def test_counters_are_raised_never_lowered(tmp_path: Path) -> None:
    store = _store(tmp_path)
    try:
        _write(store)
        assert store.raise_counters({"event_seq": 10, "job_id": 0}) == {"event_seq": 1}
        assert store.raise_counters({"event_seq": 5}) == {}
        _write(store)
        assert store.list_events()[-1].seq == 11
    finally:
        store.close()


def test_highest_ids_reads_every_line(tmp_path: Path) -> None:
    lines = [{"seq": 1, "job": 7}, {"seq": 2}, {"seq": 3, "job": 2}, "torn"]
    path = tmp_path / "events.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n{half")
    assert highest_ids(path) == {"event_seq": 3, "job_id": 7}


def test_a_file_sqlite_finds_malformed_is_refused_at_open_as_damaged(tmp_path: Path) -> None:
    _store(tmp_path).close()
    with (tmp_path / "jobd.db").open("r+b") as f:
        f.seek(100)  # past the header: the schema's page
        f.write(b"\xff" * 3000)
    with pytest.raises(StoreUnavailable, match="is damaged: database disk image is malformed"):
        _store(tmp_path)
