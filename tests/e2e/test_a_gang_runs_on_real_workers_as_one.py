"""A multi-host job (a gang of 2) on a real `jobd broker` and two real `jobd worker`s.

Worker `a` advertises 127.0.0.2 and `b` 127.0.0.3 (the members' addresses are written
at the bind, as the scheduler takes them from each worker's `status.address`). The gang
is bound the way the scheduler binds one (`tests/gang_binding.py`, one store write), by this
test, with the broker stopped a moment (its workers are cordoned so no pass binds it as
one job of one node first); from there on everything is the agents' and the broker's
own: each member's agent runs its rank, rank 0 chooses the master port, rank 1 starts
once it is known, every report says its rank.

Held here: both members run with the environment of the design and the job Succeeds,
each member's output read alone (`rank`) through the Python SDK, its async client and the
real `jobd mcp`;
a SIGKILL of one member's process ends the other within its grace and the job is Failed
naming that rank; a `kill -9` of one member's agent stops no member and the restarted
agent re-adopts its member, whose end is then accepted as that rank's.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from jobd import ApiError, AsyncClient, Client
from jobd.store.sql import open_store
from tests.e2e import harness
from tests.gang_binding import bind_gang

ADDRESSES = {"a": "127.0.0.2", "b": "127.0.0.3"}
GANG_ENV = [
    "JOBD_NODE_RANK", "JOBD_NUM_NODES", "JOBD_NODE_ADDRS", "JOBD_MASTER_ADDR",
    "JOBD_MASTER_PORT", "PET_NNODES", "PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT",
    "MASTER_ADDR", "MASTER_PORT", "JOBD_JOB_ID",
]  # fmt: skip
# Each member notes its environment and pid in the shared directory, then exits at once
# ("env") or waits for a `go` file ("wait"); SIGTERM is noted and ends it 143.
MEMBER = f"""
import json, os, pathlib, signal, sys, time
here = pathlib.Path(sys.argv[1])
rank = os.environ["JOBD_NODE_RANK"]
def term(*_):
    (here / f"term-{{rank}}").write_text(str(time.time()))
    sys.exit(143)
signal.signal(signal.SIGTERM, term)
(here / f"env-{{rank}}.json").write_text(json.dumps({{k: os.environ.get(k) for k in {GANG_ENV!r}}}))
(here / f"pid-{{rank}}").write_text(str(os.getpid()))
print(f"rank {{rank}} says hello", flush=True)
while sys.argv[2] == "wait" and not (here / "go").exists():
    time.sleep(0.05)
"""


class GangLab(harness.Lab):
    """A broker and the workers `a` and `b`, cordoned (only this test binds gangs)."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        for name in ADDRESSES:
            self.start_worker(name, "--slots", "2", "--default-grace", "5")
        self.wait_workers(2)
        for name in ADDRESSES:
            assert self.job("cordon", name).returncode == 0
        self.shared = root / "shared"
        self.shared.mkdir()
        (root / "member.py").write_text(MEMBER)

    def submit_gang(self, mode: str) -> int:
        command = [sys.executable, str(self.root / "member.py"), str(self.shared), mode]
        doc = json.loads(harness.manifest("gang", command, nodes=2, cwd=str(self.root)))
        created: dict[str, Any] = self.api("POST", "/jobs", doc)
        job_id: int = created["metadata"]["id"]
        self.restart_broker(lambda: self._bind(job_id))
        return job_id

    def _bind(self, job_id: int) -> None:
        store = open_store(f"sqlite:///{self.root / 'data' / 'jobd.db'}")
        try:
            job = store.get_job(job_id)
            assert job is not None
            placements = [(name, address, []) for name, address in ADDRESSES.items()]
            store.update_job(*bind_gang(job, placements, job.metadata.created_at))
        finally:
            store.close()

    def wait_phase(self, job_id: int, *phases: str, timeout: float = 30) -> dict[str, Any]:
        self.wait_until(lambda: self.phase(job_id) in phases, timeout)
        found: dict[str, Any] = self.api("GET", f"/jobs/{job_id}")
        return found

    def phase(self, job_id: int) -> str:
        return str(self.api("GET", f"/jobs/{job_id}")["status"]["phase"])

    def wait_file(self, name: str, timeout: float = 30) -> Path:
        path = self.shared / name
        self.wait_until(lambda: path.exists() and path.read_text(), timeout)
        return path


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[GangLab]:
    running = GangLab(tmp_path)
    yield running
    running.close()


def test_a_gang_of_two_runs_with_the_environment_of_its_ranks(lab: GangLab) -> None:
    job_id = lab.submit_gang("env")
    done = lab.wait_phase(job_id, "Succeeded", "Failed")
    assert done["status"]["phase"] == "Succeeded", done["status"]
    port = done["status"]["master_port"]
    assert isinstance(port, int)
    for rank in (0, 1):
        env = json.loads(lab.wait_file(f"env-{rank}.json").read_text())
        master = {"ADDR": "127.0.0.2", "PORT": str(port)}
        assert env == {
            "JOBD_NODE_RANK": str(rank), "JOBD_NUM_NODES": "2",
            "JOBD_NODE_ADDRS": "127.0.0.2,127.0.0.3",
            "JOBD_MASTER_ADDR": master["ADDR"], "JOBD_MASTER_PORT": master["PORT"],
            "PET_NNODES": "2", "PET_NODE_RANK": str(rank),
            "PET_MASTER_ADDR": master["ADDR"], "PET_MASTER_PORT": master["PORT"],
            "MASTER_ADDR": master["ADDR"], "MASTER_PORT": master["PORT"],
            "JOBD_JOB_ID": str(job_id),
        }, rank  # fmt: skip
    members = done["status"]["members"]
    assert [(m["rank"], m["worker"], m["phase"]) for m in members] == [
        (0, "a", "Succeeded"),
        (1, "b", "Succeeded"),
    ]
    _each_ranks_output_reads_alone(lab, job_id)


def _each_ranks_output_reads_alone(lab: GangLab, job_id: int) -> None:
    """`rank` through the SDK (sync and async) and the MCP tool, as `job logs --rank N`."""
    server, token = lab.url, (lab.root / "data" / "admin.token").read_text().strip()
    with Client(server, token=token) as client:
        interleaved = client.logs(job_id).splitlines()
        assert sorted(interleaved) == ["[rank 0] rank 0 says hello", "[rank 1] rank 1 says hello"]
        for rank in (0, 1):
            assert client.logs(job_id, rank=rank) == f"rank {rank} says hello\n"
            assert list(client.logs(job_id, follow=True, rank=rank)) == [
                f"rank {rank} says hello\n"
            ]
            assert client.log_tail(job_id, 5, rank=rank) == f"rank {rank} says hello\n"
        with pytest.raises(ApiError) as missing:
            client.logs(job_id, rank=2)
        assert missing.value.status == 404

    async def through_async_and_mcp() -> None:
        async with AsyncClient(server, token=token) as aclient:
            assert await aclient.logs(job_id, rank=1) == "rank 1 says hello\n"
            followed = [line async for line in aclient.follow_logs(job_id, rank=0)]
            assert followed == ["rank 0 says hello\n"]
        params = StdioServerParameters(command=str(harness.BIN / "jobd"), args=["mcp"],
                                       env=lab.env | {"JOBD_TOKEN": token})  # fmt: skip
        with (lab.root / "mcp.log").open("a") as errlog:
            async with (
                stdio_client(params, errlog=errlog) as (read, write),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                for rank in (0, 1):
                    got = await session.call_tool("job_logs", {"job": str(job_id), "rank": rank})
                    assert not got.is_error, got.content
                    assert got.structured_content is not None
                    assert got.structured_content["text"] == f"rank {rank} says hello\n"
                    assert got.structured_content["job_done"] is True
                refused = await session.call_tool("job_logs", {"job": str(job_id), "rank": 2})
                assert refused.is_error

    anyio.run(through_async_and_mcp)


def test_a_killed_member_ends_the_other_within_its_grace_naming_its_rank(lab: GangLab) -> None:
    job_id = lab.submit_gang("wait")
    lab.wait_phase(job_id, "Running")
    pids = [int(lab.wait_file(f"pid-{rank}").read_text()) for rank in (0, 1)]
    killed_at = time.time()
    os.kill(pids[1], signal.SIGKILL)
    ended = lab.wait_phase(job_id, "Failed", "Succeeded", "Cancelled", timeout=20)
    status = ended["status"]
    assert (status["phase"], status["failed_rank"]) == ("Failed", 1), status
    assert status["exit_signal"] == signal.SIGKILL
    termed = float(lab.wait_file("term-0").read_text())
    assert termed - killed_at < 5, "rank 0 got SIGTERM at once, well within its grace"
    assert [m["phase"] for m in status["members"]] == ["Failed", "Failed"]


def test_a_killed_members_agent_is_replaced_and_its_member_readopted(lab: GangLab) -> None:
    job_id = lab.submit_gang("wait")
    lab.wait_phase(job_id, "Running")
    pids = [int(lab.wait_file(f"pid-{rank}").read_text()) for rank in (0, 1)]
    agent = lab.processes.pop("b")
    agent.send_signal(signal.SIGKILL)
    agent.wait(10)
    assert all(harness.process_alive(pid) for pid in pids), "no member stops with its agent"
    lab.start_worker("b", "--slots", "2", "--default-grace", "5")
    lab.wait_until(lambda: any(e["job"] == job_id for e in _readopted(lab)))
    assert lab.api("GET", f"/jobs/{job_id}")["status"]["phase"] == "Running"
    (lab.shared / "go").write_text("1")
    done = lab.wait_phase(job_id, "Succeeded", "Failed")
    assert done["status"]["phase"] == "Succeeded", json.dumps(done["status"], indent=1)


def _readopted(lab: GangLab) -> list[dict[str, Any]]:
    """The `job_readopted` lines of events.jsonl."""
    lines = (lab.root / "logs" / "events.jsonl").read_text().splitlines()
    found = [json.loads(line) for line in lines if line.strip()]
    return [e for e in found if e["event"] == "job_readopted"]
