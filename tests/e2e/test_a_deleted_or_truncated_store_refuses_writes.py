"""The SQLite store's file deleted or truncated under a real `jobd dev`.

SQLite goes on writing to the file it opened: before the fix, every submit still got 201
and all of it was gone at the restart (ids from 1 again, seqs in events.jsonl too), and a
truncated file was a traceback at the next start. Now the broker sees that its file is
gone or cut (store/sql/storefile.py): submits get 503 naming the file, /readyz fails,
a restart numbers on past what events.jsonl has seen, and a truncated file ends the
next start in one sentence.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import httpx

from tests.e2e.harness import Jobd, _free_port, _launch, start_jobd, stop_jobd
from tests.integration.conftest import job_document


def _submit(api: httpx.Client, name: str) -> httpx.Response:
    return api.post("/jobs", json=job_document(name, command=["true"]))


def _refused(jobd: Jobd, db: Path, what: str) -> None:
    """A submit gets 503 naming the file, and /readyz fails saying the same."""
    with jobd.api() as api:
        answer = _submit(api, "after")
        assert answer.status_code == 503, answer.text
        assert str(db) in answer.json()["detail"] and what in answer.json()["detail"]
        assert _submit(api, "after-2").status_code == 503  # still, not only once
        ready = api.get("/readyz")
        assert ready.status_code == 503, ready.text
        assert str(db) in ready.text
        assert api.get(f"/jobs/{_ids(jobd)[-1]}").status_code == 200  # reads still answer


def _ids(jobd: Jobd) -> list[int]:
    return sorted(e["job"] for e in jobd.events(event="job_created"))


def _seqs(root: Path) -> list[int]:
    lines = (root / "logs" / "events.jsonl").read_text().splitlines()
    return [json.loads(line)["seq"] for line in lines]


def _submit_three(jobd: Jobd) -> None:
    with jobd.api() as api:
        for i in range(3):
            assert _submit(api, f"before-{i}").status_code == 201


def test_a_deleted_store_refuses_writes_and_its_ids_are_never_reused(tmp_path: Path) -> None:
    jobd = start_jobd(tmp_path)
    db = tmp_path / "data" / "jobd.db"
    try:
        _submit_three(jobd)
        before = _ids(jobd)
        for end in ("", "-wal", "-shm"):
            db.with_name(db.name + end).unlink(missing_ok=True)
        _refused(jobd, db, "deleted")
        assert "store_file_replaced" in (tmp_path / "dev.log").read_text()
    finally:
        stop_jobd(jobd)
    jobd = start_jobd(tmp_path)  # a new, empty store: numbering on
    try:
        with jobd.api() as api:
            answer = _submit(api, "new")
            assert answer.status_code == 201, answer.text
            assert answer.json()["metadata"]["id"] > max(before)
    finally:
        stop_jobd(jobd)
    seqs = _seqs(tmp_path)
    assert seqs == sorted(set(seqs)), "a seq in events.jsonl was used twice"


def test_a_truncated_store_refuses_writes_and_its_next_start_says_why(tmp_path: Path) -> None:
    jobd = start_jobd(tmp_path)
    db = tmp_path / "data" / "jobd.db"
    try:
        _submit_three(jobd)
        os.truncate(db, 0)
        _refused(jobd, db, "truncated")
    finally:
        stop_jobd(jobd)
    again = _launch(tmp_path, _free_port(), (), {})
    try:
        code = again.process.wait(60)
    finally:
        if again.process.poll() is None:
            again.process.kill()
    said = (tmp_path / "dev.log").read_text()
    assert code != 0
    assert "Traceback" not in said
    assert f"jobd: the store at {db} is truncated" in said


def test_a_store_deleted_while_stopped_numbers_on_past_events_jsonl(tmp_path: Path) -> None:
    jobd = start_jobd(tmp_path)
    try:
        _submit_three(jobd)
        before = _ids(jobd)
    finally:
        stop_jobd(jobd)
    for end in ("", "-wal", "-shm"):
        (tmp_path / "data" / f"jobd.db{end}").unlink(missing_ok=True)
    jobd = start_jobd(tmp_path)
    try:
        with jobd.api() as api:
            answer = _submit(api, "new")
            assert answer.status_code == 201, answer.text
            assert answer.json()["metadata"]["id"] > max(before)
    finally:
        stop_jobd(jobd)
    assert "store_counters_advanced" in (tmp_path / "dev.log").read_text()
    seqs = _seqs(tmp_path)
    assert seqs == sorted(set(seqs)), "a seq in events.jsonl was used twice"


def test_a_store_truncated_while_stopped_is_refused_in_one_sentence(tmp_path: Path) -> None:
    stop_jobd(start_jobd(tmp_path))
    db = tmp_path / "data" / "jobd.db"
    os.truncate(db, 0)
    again = _launch(tmp_path, _free_port(), (), {})
    try:
        code = again.process.wait(60)
    finally:
        if again.process.poll() is None:
            again.process.kill()
    said = (tmp_path / "dev.log").read_text()
    assert code != 0
    assert "Traceback" not in said
    assert f"jobd: the store at {db} is truncated (0 bytes" in said
