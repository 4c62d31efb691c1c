"""status.json, and every other record of the supervisor's, is replaced whole or not at all.

A reader (the agent, or a re-adopting one) may look at any moment: it must see the old file
or the new one, never a torn write; a finished job's directory keeps no temp files.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import anyio
import pytest

from jobd.worker.shim.client import launch
from jobd.worker.shim.statedir import read_json, write_json_atomic
from tests.integration.supervised import (
    python_spec,
)


def test_a_reader_never_sees_a_partly_written_record(tmp_path: Path) -> None:
    path = tmp_path / "status.json"
    write_json_atomic(path, {"n": -1, "pad": ""})
    pad = "x" * 1_000_000  # large enough that a write in place would be seen half done
    done = threading.Event()

    def writer() -> None:
        for n in range(20):
            write_json_atomic(path, {"n": n, "pad": pad})
        done.set()

    thread = threading.Thread(target=writer)
    thread.start()
    seen = set()
    while not done.is_set():
        data = json.loads(path.read_bytes())  # raises on a torn file
        seen.add(data["n"])
    thread.join()
    assert read_json(path) == {"n": 19, "pad": pad}
    assert len(seen) > 1  # the reader really raced the writer


@pytest.mark.anyio
async def test_a_finished_jobs_records_are_whole_and_no_temp_file_is_left(
    state_root: Path,
) -> None:
    job = launch(state_root / "42-1", python_spec("import sys; sys.exit(5)"))
    with anyio.fail_after(5):
        await job.wait()
    names = sorted(p.name for p in job.state_dir.iterdir())
    assert names == [
        "spec.json",
        "status.json",
        "stderr",
        "stdout",
        "supervisor.json",
    ]  # the lock is the directory's own; the log is shared, beside the directories
    status = read_json(job.state_dir / "status.json")
    assert status is not None and status["exit_code"] == 5
    assert (job.state_dir / "spec.json").stat().st_mode & 0o077 == 0  # it holds the env
