"""`jobd dev --events-max-bytes` rotates events.jsonl; `job events --file` reads across.

A real `jobd dev` with a cap of a kilobyte runs a few jobs: the log directory holds
several rotated files, every line whole, and `job events --file` (the files, oldest
first, no broker) prints exactly what `job events` (the broker's table) prints.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.e2e.harness import start_jobd, stop_jobd


def test_rotated_files_hold_every_event_the_broker_has_in_order(tmp_path: Path) -> None:
    jobd = start_jobd(tmp_path, "--events-max-bytes", "1024", "--events-keep", "1000")
    try:
        ids = [json.loads(jobd.ok("submit", "-o", "json", "--", "true")) for _ in range(8)]
        for doc in ids:
            jobd.wait_phase(doc["metadata"]["id"], "Succeeded")
        from_broker = json.loads(jobd.ok("events", "-o", "json"))
    finally:
        stop_jobd(jobd)
    log = tmp_path / "logs" / "events.jsonl"
    rotated = sorted(tmp_path.joinpath("logs").glob("events.jsonl.*"))
    assert len(rotated) >= 3
    for path in [*rotated, log]:
        assert all(json.loads(line) for line in path.read_text().splitlines())  # whole lines
    from_files = json.loads(jobd.ok("events", "--file", str(log), "-o", "json"))
    assert from_files[: len(from_broker)] == from_broker  # stopping may add its own lines
