"""events.jsonl rotates by size and loses no line, splits none, and reads back in order.

A flood of events goes through the real EventLog (a store listener over a real SQLite
store) with a cap of a few hundred bytes: every event is a line in exactly one file, each
line whole JSON, in seq order across the files oldest first; only `keep` rotated files
stay; a broker started right after a rotation (the live file empty) appends nothing twice;
and `job events --file` reads across the rotated files without a broker.
"""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from jobd.broker.streams.eventlog import EventLog
from jobd.cli.job_main import cli
from jobd.eventfiles import files_oldest_first, read_events
from jobd.store.base import EventRecord
from jobd.store.sql import SQLStore, open_store, sqlite_url


def _flood(store: SQLStore, count: int) -> None:
    """`count` events, in commits of 1 to 7 events, each with a field of varied length."""
    written = 0
    while written < count:
        size = min(1 + written % 7, count - written)
        store.append_events(
            EventRecord(
                "job_cancelled", job=written + i + 1, fields={"reason": "x" * (written % 50)}
            )
            for i in range(size)
        )
        written += size


def _open(tmp_path: Path, max_bytes: int, keep: int) -> tuple[SQLStore, EventLog]:
    store = open_store(sqlite_url(tmp_path))
    log = EventLog(tmp_path / "logs", store, max_bytes=max_bytes, keep=keep)
    store.subscribe(log.on_commit)
    return store, log


def _lines(path: Path) -> list[bytes]:
    return [line for f in files_oldest_first(path) for line in f.read_bytes().splitlines(True)]


def test_a_flood_of_events_is_every_line_once_whole_and_in_order(tmp_path: Path) -> None:
    store, log = _open(tmp_path, max_bytes=4000, keep=1000)
    _flood(store, 3000)
    log.close()
    files = files_oldest_first(log.path)
    assert len(files) > 40  # it did rotate, many times
    lines = _lines(log.path)
    assert all(line.endswith(b"\n") for line in lines)  # none split
    seqs = [json.loads(line)["seq"] for line in lines]
    assert seqs == list(range(1, 3001))  # none lost, none twice, oldest first
    biggest_write = 7 * max(len(line) for line in lines)
    assert all(f.stat().st_size < 4000 + biggest_write for f in files)
    store.close()


def test_only_keep_rotated_files_stay_and_they_are_the_newest(tmp_path: Path) -> None:
    store, log = _open(tmp_path, max_bytes=500, keep=3)
    _flood(store, 1000)
    log.close()
    files = files_oldest_first(log.path)
    assert [f.name for f in files[:-1]] == ["events.jsonl.3", "events.jsonl.2", "events.jsonl.1"]
    seqs = [event["seq"] for event in read_events(log.path)]
    assert seqs == list(range(seqs[0], 1001)) and seqs[0] > 1
    store.close()


def test_a_restart_just_after_a_rotation_appends_nothing_twice(tmp_path: Path) -> None:
    store, log = _open(tmp_path, max_bytes=300, keep=100)
    _flood(store, 40)
    while log.path.stat().st_size:  # write until a rotation leaves the live file empty
        _flood_one(store)
    log.close()
    store.close()
    store, log = _open(tmp_path, max_bytes=300, keep=100)  # the broker again
    assert log.path.stat().st_size == 0 and not log.behind
    _flood_one(store)
    log.close()
    seqs = [event["seq"] for event in read_events(log.path)]
    assert seqs == list(range(1, len(seqs) + 1))
    store.close()


def _flood_one(store: SQLStore) -> None:
    store.append_events([EventRecord("job_started", job=1)])


def test_job_events_file_reads_across_the_rotated_files(tmp_path: Path) -> None:
    store, log = _open(tmp_path, max_bytes=400, keep=50)
    _flood(store, 200)
    log.close()
    store.close()
    assert len(files_oldest_first(log.path)) > 5
    runner = CliRunner()
    read = runner.invoke(cli, ["events", "--file", str(log.path), "-o", "json"])
    assert read.exit_code == 0, read.output
    assert [e["job"] for e in json.loads(read.output)] == list(range(1, 201))
    one = runner.invoke(cli, ["events", "--file", str(log.path), "--job", "150", "-o", "json"])
    assert [e["job"] for e in json.loads(one.output)] == [150]
    missing = runner.invoke(cli, ["events", "--file", str(tmp_path / "nothing.jsonl")])
    assert missing.exit_code == 2 and "no such file" in missing.output
