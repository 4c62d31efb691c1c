"""`jobd migrate-store`'s copier (store/copying.py): a SQLite store moved into a fresh
PostgreSQL database holds, table for table, the rows it held, and its counters; new ids
and revisions continue past the old ones. A target that holds anything is refused and
left as it was; a copy that fails midway, or is killed, leaves the target without a
table; a store at an older schema is moved and migrated on the way; bodies travel as the
text they were.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from jobd.api.models import Job, JobSpec, ObjectMeta, Phase, Project, ProjectSpec
from jobd.store import EventRecord, SQLStore, TokenRecord, normalize_url, open_store
from jobd.store.base import RunCharge
from jobd.store.copying import CopyRefused, TargetNotEmpty, copy_store

pytestmark = [pytest.mark.postgres, pytest.mark.forged_events]

BIN = Path(sys.executable).parent


def _job(name: str, phase: Phase = Phase.PENDING, parents: list[int] | None = None) -> Job:
    job = Job(metadata=ObjectMeta(name=name), spec=JobSpec(command=["true"]))
    job.status.phase = phase
    job.status.parents = parents or []
    return job


def _filled(url: str) -> SQLStore:
    """A store with a bit of everything: jobs (one running at attempt 3, one depending on
    another), a project, a token, events, usage, an array row, a body with a field this
    jobd does not know."""
    store = open_store(url)
    first, running = store.create_jobs([_job("first"), _job("running")])
    store.create_jobs([_job("child", parents=[first.id])])
    moved = running.evolve()
    moved.status.phase, moved.status.worker, moved.status.attempt = Phase.RUNNING, "w1", 3
    store.update_job(moved)
    store.put_project(Project(metadata=ObjectMeta(name="vision"), spec=ProjectSpec(priority=60)))
    store.create_token(TokenRecord("w1", "ab" * 32, "worker", worker="w1", created_at="x"))
    store.append_events([EventRecord("job_created", first.id, None, {"x": 1})])
    store.charge_usage([RunCharge(first.id, 1, "default", "", 2.5, 1000.0)], 3600.0)
    with store.engine.begin() as conn:
        conn.execute(
            sa.text("INSERT INTO arrays (id, project, name, body) VALUES (7, 'p', 'a', '{}')")
        )
        conn.execute(sa.text("UPDATE jobd_meta SET value = 7 WHERE key = 'array_id'"))
        body = json.loads(conn.execute(sa.text("SELECT body FROM jobs WHERE id = 1")).scalar_one())
        body["status"]["members"] = [{"rank": 0, "worker": "w1", "phase": "Running"}]
        text = json.dumps(body, separators=(",", ":"))
        conn.execute(sa.text("UPDATE jobs SET body = :b WHERE id = 1"), {"b": text})
    return store


def _dump(url: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table but the migrations' own, in primary-key order."""
    engine = sa.create_engine(normalize_url(url), poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            found = {}
            for name in sa.inspect(conn).get_table_names():
                if name == "alembic_version":
                    continue
                table = sa.Table(name, sa.MetaData(), autoload_with=conn)
                order = list(table.primary_key.columns) or list(table.columns)
                found[name] = [tuple(r) for r in conn.execute(sa.select(table).order_by(*order))]
            return found
    finally:
        engine.dispose()


def test_every_row_and_counter_moves_and_ids_continue(tmp_path: Path, postgres_url: str) -> None:
    source_url = f"sqlite:///{tmp_path}/jobd.db"
    _filled(source_url).close()
    said: list[str] = []

    copied = copy_store(source_url, postgres_url, said.append)

    before, after = _dump(source_url), _dump(postgres_url)
    assert before == after
    assert {"jobs", "job_deps", "arrays", "projects", "tokens", "events", "usage"} <= set(after)
    assert all(after[name] for name in ("jobs", "job_deps", "arrays", "tokens", "usage"))
    assert copied.rows["jobs"] == 3 and "jobs: 3 rows copied" in said
    assert copied.counters["job_id"] == 3 and copied.counters["array_id"] == 7
    target = open_store(postgres_url)
    try:
        carried = target.get_job(2)
        assert carried is not None and carried.status.attempt == 3
        assert carried.status.phase == Phase.RUNNING
        with target.engine.connect() as conn:
            raw = conn.execute(sa.text("SELECT body FROM jobs WHERE id = 1")).scalar_one()
        assert '"members":[{"rank":0' in raw  # the body as it was, unknown field and all
        revision = target.revision()
        (new,) = target.create_jobs([_job("after-the-move")])
        assert new.id == 4 and target.revision() > revision == copied.counters["revision"]
        assert [t.label for t in target.list_tokens()] == ["w1"]
    finally:
        target.close()


def test_a_target_holding_anything_is_refused_and_left_as_it_was(
    tmp_path: Path, postgres_url: str
) -> None:
    source_url = f"sqlite:///{tmp_path}/jobd.db"
    _filled(source_url).close()
    copy_store(source_url, postgres_url)
    before = _dump(postgres_url)

    with pytest.raises(TargetNotEmpty) as refused:
        copy_store(source_url, postgres_url)

    assert "is not empty: " in str(refused.value) and "jobs (3 rows)" in str(refused.value)
    assert _dump(postgres_url) == before


def test_a_copy_that_fails_midway_leaves_the_target_without_a_table(
    tmp_path: Path, postgres_url: str
) -> None:
    source_url = f"sqlite:///{tmp_path}/jobd.db"
    store = _filled(source_url)
    with store.engine.begin() as conn:  # SQLite keeps what PostgreSQL's varchar(63) refuses
        conn.execute(sa.text("INSERT INTO projects VALUES (:n, 1, '{}')"), {"n": "p" * 100})
    store.close()

    with pytest.raises(Exception, match="too long"):
        copy_store(source_url, postgres_url)

    assert _dump(postgres_url) == {}


def test_a_store_at_an_older_schema_is_moved_and_migrated(
    tmp_path: Path, postgres_url: str
) -> None:
    source_url = f"sqlite:///{tmp_path}/old.db"
    old = SQLStore(source_url)
    old.migrate("0008")  # before fair share's usage tables
    with old.engine.begin() as conn:
        conn.execute(sa.text("INSERT INTO projects VALUES ('vision', 4, :b)"), {"b": '{"a":1}'})
        conn.execute(sa.text("UPDATE jobd_meta SET value = 41 WHERE key = 'job_id'"))
    old.close()

    copied = copy_store(source_url, postgres_url)

    assert copied.source_schema == "0008" and copied.schema >= "0009"
    after = _dump(postgres_url)
    assert after["projects"] == [("vision", 4, '{"a":1}')] and after["usage"] == []
    assert copied.counters["job_id"] == 41


def test_what_cannot_be_a_copy_is_refused_before_anything_is_opened(
    tmp_path: Path, postgres_url: str
) -> None:
    missing = f"sqlite:///{tmp_path}/none.db"
    with pytest.raises(CopyRefused, match="there is no store at"):
        copy_store(missing, postgres_url)
    assert not (tmp_path / "none.db").exists()
    with pytest.raises(CopyRefused, match="the same store"):
        copy_store(postgres_url, postgres_url)
    (tmp_path / "empty.db").touch()
    with pytest.raises(CopyRefused, match="not a jobd store"):
        copy_store(f"sqlite:///{tmp_path}/empty.db", postgres_url)


def test_a_copy_killed_midway_leaves_the_target_without_a_table(
    tmp_path: Path, postgres_url: str
) -> None:
    source_url = f"sqlite:///{tmp_path}/jobd.db"
    store = open_store(source_url)
    for start in range(0, 5000, 1000):  # enough that the copy is still going when killed
        store.create_jobs([_job(f"j{i}") for i in range(start, start + 1000)])
    store.close()
    command = [str(BIN / "jobd"), "migrate-store", "--from", source_url, "--to", postgres_url]
    copying = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    assert copying.stderr is not None
    first = copying.stderr.readline()  # the first table is copied: tables made, tx open
    copying.send_signal(signal.SIGKILL)
    copying.wait(10)
    assert first.startswith("jobd migrate-store: arrays: ") and copying.returncode == -9

    assert _dump(postgres_url) == {}
    copy_store(source_url, postgres_url)  # and it can simply be run again
    assert len(_dump(postgres_url)["jobs"]) == 5000
