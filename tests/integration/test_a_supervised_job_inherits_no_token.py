"""The per-job supervisor, started by an agent whose environment holds a token, holds none
itself, and neither does the workload: both `/proc/PID/environ` read back clean."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from jobd.worker.shim.client import launch
from tests.integration.supervised import python_spec

pytestmark = pytest.mark.anyio

# The workload writes its own environment and its parent's (the supervisor's) as read
# from /proc, then exits.
DUMP = """
import os, sys
with open(sys.argv[1], "wb") as out:
    for pid in (os.getpid(), os.getppid()):
        with open(f"/proc/{pid}/environ", "rb") as f:
            out.write(f.read() + b"\\n--\\n")
"""


async def test_neither_supervisor_nor_workload_carries_the_agents_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JOBD_TOKEN", "jobd_the-agents-token-0123456789abcdef")
    monkeypatch.setenv("JOBD_TOKEN_FILE", "/etc/jobd/worker.token")
    dump = tmp_path / "environ"
    job = launch(tmp_path / "state", python_spec(DUMP, str(dump)))
    await job.started()
    with anyio.fail_after(10):
        ended = await job.wait()
    assert ended.exit_code == 0
    workload, supervisor, _ = dump.read_bytes().split(b"\n--\n")
    assert b"PATH=" in workload and b"PYTHONPATH=" in supervisor  # both were read
    assert b"the-agents-token" not in workload + supervisor
    assert b"JOBD_TOKEN" not in workload + supervisor
