"""An LLM agent's view: the real `jobd mcp` on stdio, driven by the MCP SDK's own client,
against a real `jobd dev`. It submits, watches, reads logs and events, cancels, preempts and
resumes; and a user token scoped to one project sees no other project's job through it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.types import TextContent

from tests.e2e.harness import BIN, Jobd, start_jobd, stop_jobd, write_script

pytestmark = pytest.mark.anyio

TOOLS = {
    "submit_job",
    "get_job",
    "explain_job",
    "list_jobs",
    "job_logs",
    "job_events",
    "cancel_job",
    "preempt_job",
    "resume_job",
    "list_workers",
}


@pytest.fixture
def jobd(tmp_path: Path) -> Iterator[Jobd]:
    running = start_jobd(tmp_path, "--slots", "4")
    yield running
    stop_jobd(running)


class Agent:
    """An MCP client session with the tool calls a test makes."""

    def __init__(self, session: ClientSession) -> None:
        self.session = session

    async def call(self, tool: str, **arguments: Any) -> Any:
        result = await self.session.call_tool(tool, arguments)
        assert not result.is_error, f"{tool}: {_text(result.content)}"
        return result.structured_content

    async def refused(self, tool: str, **arguments: Any) -> str:
        result = await self.session.call_tool(tool, arguments)
        assert result.is_error, f"{tool} was not refused: {result.structured_content}"
        return _text(result.content)

    async def until(self, job: str | int, *phases: str, timeout: float = 20) -> Any:
        with anyio.fail_after(timeout):
            while (doc := await self.call("get_job", job=str(job)))["status"][
                "phase"
            ] not in phases:
                await anyio.sleep(0.1)
        return doc


def _text(content: list[Any]) -> str:
    return " ".join(c.text for c in content if isinstance(c, TextContent))


@asynccontextmanager
async def agent(jobd: Jobd, **env: str) -> AsyncIterator[Agent]:
    params = StdioServerParameters(command=str(BIN / "jobd"), args=["mcp"], env=jobd.env | env)
    with (jobd.root / "mcp.log").open("a") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            yield Agent(session)


async def test_an_agent_submits_watches_and_stops_jobs(jobd: Jobd) -> None:
    sleeper = write_script(jobd.root, "sleeper.py", "import time\ntime.sleep(60)\n")
    async with agent(jobd) as a:
        listed = await a.session.list_tools()
        assert {t.name for t in listed.tools} == TOOLS
        hello = await a.call(
            "submit_job",
            command=[sys.executable, "-c", "print('hello from an agent')"],
            name="hello",
            env={"API_TOKEN": "s3cret-value"},
        )
        assert "s3cret-value" not in json.dumps(hello)  # masked, as the broker sends it
        done = await a.until("default/hello", "Succeeded", "Failed")
        assert done["status"]["phase"] == "Succeeded"
        logs = await a.call("job_logs", job="hello")
        assert logs["text"] == "hello from an agent\n" and logs["job_done"] is True
        events = await a.call("job_events", job=str(hello["metadata"]["id"]))
        assert "job_finished" in [e["event"] for e in events["items"]]
        assert "no job named 'nope'" in await a.refused("get_job", job="nope")
        refusal = await a.refused("submit_job", command=["true"], checkpoint_grace_s=900)
        assert "checkpoint_grace_s 900 s is over" in refusal and "--" not in refusal
        capped = await a.call("submit_job", command=sleeper, name="capped", max_runtime_s=1)
        assert capped["spec"]["max_runtime_s"] == 1
        timed_out = await a.until("capped", "Failed")
        assert timed_out["status"]["reason"] == "MaxRuntimeExceeded"

        other = (await a.call("submit_job", command=sleeper, name="other"))["metadata"]["id"]
        await a.until(other, "Running")
        assert (await a.call("cancel_job", job=str(other)))["status"][
            "desired_phase"
        ] == "Cancelled"
        await a.until(other, "Cancelled")

        low = await a.call(
            "submit_job", command=sleeper, preemptible=True, checkpoint_grace_s=1, name="low"
        )
        await a.until("low", "Running")
        await a.call("preempt_job", job="low")
        await a.until("low", "Preempted")
        refused = await a.refused("resume_job", job="low")
        assert "never completed a checkpoint" in refused
        resumed = await a.call("resume_job", job="low", force=True)
        assert resumed["metadata"]["id"] != low["metadata"]["id"]
        assert "RESUME_FROM" in resumed["spec"]["env"]
        await a.call("cancel_job", job=str(resumed["metadata"]["id"]))

        chatty = [sys.executable, "-c", "for i in range(4000): print(f'line {i:05} ' + 'x' * 20)"]
        await a.call("submit_job", command=chatty, name="chatty")
        await a.until("chatty", "Succeeded")
        whole = "".join(f"line {i:05} {'x' * 20}\n" for i in range(4000))
        tail = await a.call("job_logs", job="chatty", tail_lines=3000, max_bytes=1000)
        assert tail["truncated"] is True and whole.endswith(tail["text"])
        assert len(tail["text"]) == 1000
        pages, offset = [], 0
        while not (page := await a.call("job_logs", job="chatty", offset=offset, max_bytes=40_000))[
            "job_done"
        ]:
            pages.append(page["text"])
            assert len(page["text"]) <= 40_000
            offset = page["next_offset"]
        assert "".join([*pages, page["text"]]) == whole and len(pages) >= 3

        # hello's few events are far back by now: the newest two are found all the same.
        every = (await a.call("job_events", job="hello", limit=1000))["items"]
        assert every[0]["event"] == "job_created" and len(every) > 2
        assert (await a.call("job_events", job="hello", limit=2))["items"] == every[-2:]
        last = (await a.call("job_events", limit=1))["items"]
        assert len(last) == 1 and last[0]["seq"] > every[-1]["seq"]

        workers = await a.call("list_workers")
        assert [w["metadata"]["name"] for w in workers["items"]] == ["w1"]
        succeeded = await a.call("list_jobs", phase=["Succeeded"])
        assert sorted(j["name"] for j in succeeded["items"]) == ["chatty", "hello"]

        await a.call("submit_job", command=["true"], name="huge", cpus=1000)
        why = await a.call("explain_job", job="huge")
        assert why["phase"] == "Pending" and why["reason"] == "Unschedulable"
        [w1] = why["workers"]
        assert w1["worker"] == "w1" and w1["fits"] is False
        assert w1["says"][0].startswith("too small even when empty: cpus (needs 1000, has ")
        assert [s["resource"] for s in w1["short"]] == ["cpus"] and w1["short"][0]["need"] == 1000
        await a.call("cancel_job", job="huge")
        ended = await a.call("explain_job", job="hello")
        assert ended == {
            "job": hello["metadata"]["id"],
            "name": "default/hello",
            "phase": "Succeeded",
            "summary": f"job {hello['metadata']['id']} has ended Succeeded (exit 0)",
        }


async def test_a_project_token_sees_only_its_project_through_mcp(jobd: Jobd) -> None:
    alice = _token(jobd, "--role", "user", "--project", "a", "--name", "alice")
    async with agent(jobd) as admin:
        theirs = await admin.call("submit_job", command=["true"], project="b", name="theirs")
    token_file = jobd.root / "alice.token"
    token_file.write_text(alice)
    token_file.chmod(0o600)
    async with agent(jobd, JOBD_TOKEN_FILE=str(token_file)) as a:
        mine = await a.call("submit_job", command=["true"], project="a", name="mine")
        assert mine["metadata"]["project"] == "a"
        assert "'b'" in await a.refused("get_job", job=str(theirs["metadata"]["id"]))
        assert "'b'" in await a.refused("explain_job", job=str(theirs["metadata"]["id"]))
        assert "'b'" in await a.refused("submit_job", command=["true"], project="b")
        listed = await a.call("list_jobs")
        assert {j["project"] for j in listed["items"]} == {"a"}


def _token(jobd: Jobd, *args: str) -> str:
    admin = (jobd.root / "data" / "admin.token").read_text().strip()
    made = subprocess.run(
        [str(BIN / "jobd"), "token", "create", "--server", jobd.url, "--token", admin, *args],
        env=jobd.env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert made.returncode == 0, made.stderr
    return made.stdout.strip()


def test_without_the_extra_jobd_mcp_says_what_to_install(tmp_path: Path) -> None:
    # The SDK marked absent, as in an environment where jobd[mcp] was not installed.
    code = "import sys; sys.modules['mcp'] = None; from jobd.daemon.main import main; main()"
    ran = subprocess.run(
        [sys.executable, "-c", code, "mcp"], capture_output=True, text=True, timeout=30
    )
    assert ran.returncode == 1
    assert ran.stderr.strip().splitlines() == [
        "jobd mcp: the MCP server needs the optional extra: pip install 'jobd[mcp]'"
    ]


def test_a_token_file_others_may_read_is_refused(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("t" * 40)
    token_file.chmod(0o644)
    ran = subprocess.run(
        [str(BIN / "jobd"), "mcp", "--token-file", str(token_file)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert ran.returncode == 2 and "chmod 600" in ran.stderr
    assert len(ran.stderr.strip().splitlines()) == 1
