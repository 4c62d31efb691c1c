"""How `job` shows a multi-host job (issue 25): WORKER `gpu1+1` (rank 0's and how many
more), NODES in `-o wide`, its members by rank under `job get ID -o wide` and in `job
describe`; `job logs --rank N` asks for one member; `--nodes` refused outside 1..1024
naming the flag, and the MCP tool's `nodes` bounded alike. A job of one node shows as before.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from jobd.cli.gangs import members_table, worker_text
from tests.unit.test_cli_verbs_against_a_fake_broker import FakeBroker, job, run


def gang(id_: int = 1, phase: str = "Running") -> dict[str, Any]:
    members = [
        {"rank": 0, "worker": "gpu1", "address": "10.0.0.1", "phase": phase, "gpus": [0, 1]},
        {"rank": 1, "worker": "gpu2", "address": "10.0.0.2", "phase": "Failed", "gpus": [3]},
    ]
    members[1].update(exit_code=3, reason="exited")
    doc = job(id_, phase, worker="gpu1", gpus=[0, 1], members=members)
    doc["spec"]["nodes"] = 2
    return doc


def test_the_worker_cell_of_a_gang_is_rank_0s_and_how_many_more() -> None:
    assert worker_text(gang()["status"]) == "gpu1+1"
    assert worker_text({"worker": "w", "members": []}) == "w"
    assert worker_text({}) == "-"
    listed = run(FakeBroker(gang(1), job(2, worker="w")), "get")
    rows = [line.split() for line in listed.stdout.splitlines()]
    assert rows[1][4] == "gpu1+1" and rows[2][4] == "w"


def test_get_one_wide_adds_nodes_and_lists_the_members_by_rank() -> None:
    result = run(FakeBroker(gang()), "get", "1", "-o", "wide")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    header = lines[0].split()
    assert lines[1].split()[header.index("NODES")] == "2"
    at = next(i for i, line in enumerate(lines) if line.startswith("RANK"))
    assert lines[at].split() == ["RANK", "WORKER", "ADDRESS", "PHASE", "EXIT", "GPUS"]
    assert lines[at + 1].split() == ["0", "gpu1", "10.0.0.1", "Running", "-", "0,1"]
    assert lines[at + 2].split() == ["1", "gpu2", "10.0.0.2", "Failed", "3", "(exited)", "3"]


def test_a_job_of_one_node_shows_no_members() -> None:
    assert members_table(job(1, worker="w")["status"]) is None
    result = run(FakeBroker(job(1, worker="w")), "get", "1", "-o", "wide")
    assert "RANK" not in result.stdout and len(result.stdout.splitlines()) == 2
    described = run(FakeBroker(job(1, worker="w")), "describe", "1")
    assert "Members:" not in described.stdout


def test_describe_lists_the_members() -> None:
    result = run(FakeBroker(gang()), "describe", "1")
    assert result.exit_code == 0, result.output
    after = result.stdout.split("Members:\n")[1].splitlines()
    assert after[0].split() == ["RANK", "WORKER", "ADDRESS", "PHASE", "EXIT", "GPUS"]
    assert after[1].split()[:3] == ["0", "gpu1", "10.0.0.1"]


def test_logs_asks_for_one_rank_only_when_told() -> None:
    broker = FakeBroker(gang())
    assert run(broker, "logs", "1", "--rank", "1").exit_code == 0
    assert run(broker, "logs", "1").exit_code == 0
    reads = [r.url.params for r in broker.requests if r.url.path == "/jobs/1/logs"]
    assert reads[0].get("rank") == "1" and "rank" not in reads[-1]
    refused = run(broker, "logs", "1", "--rank", "-1")
    assert refused.exit_code == 2 and "--rank" in refused.stderr


@pytest.mark.parametrize(
    ("given", "said"), [("0", "greater than or equal to 1"), ("1025", "less than or equal to 1024")]
)
def test_submit_refuses_nodes_outside_1_to_1024_naming_the_flag(given: str, said: str) -> None:
    broker = FakeBroker()
    result = run(broker, "submit", "--nodes", given, "--", "true")
    assert result.exit_code != 0 and f"--nodes: Input should be {said}" in result.stderr
    assert broker.requests == []
    not_a_number = run(broker, "submit", "--nodes", "x", "--", "true")
    assert not_a_number.exit_code == 2 and "'--nodes'" in not_a_number.stderr
    assert broker.requests == []


def test_the_mcp_tool_bounds_nodes_as_the_spec_does() -> None:
    pytest.importorskip("mcp")
    from tests.unit.test_every_spec_field_has_a_submit_option_and_an_mcp_parameter import (
        mcp_schema,
    )

    nodes = json.dumps(mcp_schema()["properties"]["nodes"])
    assert '"minimum": 1' in nodes and '"maximum": 1024' in nodes, nodes
