"""`job` verbs end to end against an in-memory broker behind httpx.MockTransport.

The fake answers the broker's API shapes from a dict of jobs; it stands in until the real
app can run in-process (then these move to tests/integration against it).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import click
import httpx
import pytest
from click.testing import CliRunner, Result

from jobd.cli.job_main import Settings, cli


def job(id_: int, phase: str = "Running", **status: Any) -> dict[str, Any]:
    return {
        "apiVersion": "jobd/v1",
        "kind": "Job",
        "metadata": {"id": id_, "name": f"j{id_}", "project": "vision", "resource_version": 1},
        "spec": {"command": ["python", "train.py"]},
        "status": {"phase": phase, "desired_phase": "Running", **status},
    }


class FakeBroker:
    def __init__(self, *jobs: dict[str, Any]) -> None:
        self.jobs = {j["metadata"]["id"]: j for j in jobs}
        self.requests: list[httpx.Request] = []
        self.changes: list[dict[str, Any]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        path, params = request.url.path, request.url.params
        if m := re.fullmatch(r"/jobs/(\d+)(/[a-z-]+)?", path):
            return self.on_job(int(m[1]), m[2] or "", request)
        if path == "/jobs":
            items = [j for j in self.jobs.values() if self.matches(j, params)]
            return httpx.Response(200, json={"items": items, "revision": 5})
        if path == "/watch":
            changes, self.changes = self.changes, []
            return httpx.Response(200, json={"revision": 6, "changes": changes})
        if path == "/apply":
            return self.on_apply(json.loads(request.content))
        if path == "/events":
            return self.on_events(params)
        return httpx.Response(404, json={"detail": f"no route {path}"})

    @staticmethod
    def matches(j: dict[str, Any], params: httpx.QueryParams) -> bool:
        meta = j["metadata"]
        return (
            params.get("project", meta["project"]) == meta["project"]
            and params.get("name", meta["name"]) == meta["name"]
            and j["status"]["phase"] in (params.get_list("phase") or [j["status"]["phase"]])
        )

    def on_job(self, id_: int, verb: str, request: httpx.Request) -> httpx.Response:
        if id_ not in self.jobs:
            return httpx.Response(404, json={"detail": f"job {id_} not found"})
        if verb == "/logs":
            offset = int(request.url.params["offset"])
            data = b"line one\nline two\n"[offset : offset + 9]
            done = offset + len(data) >= 18
            headers = {"X-Jobd-Offset": str(offset + len(data)), "X-Jobd-Done": str(done).lower()}
            return httpx.Response(200, content=data, headers=headers)
        if verb == "/preempt-blockers":
            body = {"candidate": id_, "worker": "gpu-box-1", "victims": [self.jobs[1]]}
            return httpx.Response(200, json={**body, "dry_run": True})
        return httpx.Response(200, json=self.jobs[id_])

    def on_apply(self, body: dict[str, Any]) -> httpx.Response:
        results = []
        for doc in body["documents"]:
            name = f"{doc['metadata'].get('project', 'default')}/{doc['metadata']['name']}"
            names = {j["metadata"]["name"] for j in self.jobs.values()}
            action = "configured" if doc["metadata"]["name"] in names else "created"
            results.append({"kind": doc["kind"], "name": name, "action": action, "object": doc})
        return httpx.Response(200, json={"results": results})

    def on_events(self, params: httpx.QueryParams) -> httpx.Response:
        if params.get("after"):
            return httpx.Response(200, json={"items": [], "last": 2})
        items = [
            {"ts": "2025-01-01T00:00:00Z", "event": "job_created", "job": 1, "seq": 1},
            {"ts": "2025-01-01T00:00:01Z", "event": "job_started", "job": 1, "seq": 2},
        ]
        return httpx.Response(200, json={"items": items, "last": 2})


def run(broker: FakeBroker, *args: str) -> Result:
    settings = Settings(transport=httpx.MockTransport(broker))
    return CliRunner().invoke(cli, list(args), obj=settings)


MANIFEST = """\
apiVersion: jobd/v1
kind: Job
metadata: {name: j1, project: vision}
spec: {command: [python, train.py], priority: 80}
---
apiVersion: jobd/v1
kind: Job
metadata: {name: fresh, project: vision}
spec: {command: [echo, hi]}
"""


@pytest.fixture
def manifest(tmp_path: Path) -> str:
    path = tmp_path / "jobs.yaml"
    path.write_text(MANIFEST)
    return str(path)


def test_apply_prints_an_action_per_document_naming_a_project_not_the_default(
    manifest: str,
) -> None:
    result = run(FakeBroker(job(1)), "apply", "-f", manifest, "--dry-run")

    assert result.exit_code == 0, result.output
    assert result.stdout == (
        "job/vision/j1 configured (dry run)\njob/vision/fresh created (dry run)\n"
    )


def test_diff_exits_1_with_a_labelled_unified_diff(manifest: str) -> None:
    result = run(FakeBroker(job(1)), "diff", "-f", manifest)

    assert result.exit_code == 1, result.output
    lines = result.stdout.splitlines()
    assert "--- live/job/vision/j1" in lines and "+++ applied/job/vision/j1" in lines
    assert "+  priority: 80" in lines
    assert "--- live/job/vision/fresh" in lines


def test_get_one_by_project_and_name_prints_one_json_object() -> None:
    result = run(FakeBroker(job(1), job(2)), "get", "vision/j2", "-o", "json")

    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == job(2)


def test_get_lists_as_json_and_table() -> None:
    broker = FakeBroker(job(1), job(2, "Pending"))

    as_json = run(broker, "get", "-o", "json")
    as_table = run(broker, "get", "--phase", "Pending")

    assert json.loads(as_json.stdout) == [job(1), job(2, "Pending")]
    assert [line.split()[0] for line in as_table.stdout.splitlines()] == ["ID", "2"]
    assert "\x1b[" not in as_table.stdout


def test_not_found_is_one_sentence_and_exit_1() -> None:
    result = run(FakeBroker(), "describe", "99")

    assert result.exit_code == 1
    assert result.stderr == "error: job 99 not found\n"


def test_an_unknown_name_is_not_found() -> None:
    result = run(FakeBroker(job(1)), "cancel", "vision/nope")

    assert result.exit_code == 1
    assert result.stderr == "error: no job named 'nope' in project 'vision'\n"


@pytest.mark.parametrize(
    ("phase", "status", "code", "said"),
    [
        ("Succeeded", {"exit_code": 0}, 0, "job/1 Succeeded"),
        ("Failed", {"exit_code": 3}, 3, "job/1 Failed (exit code 3)"),
        ("Failed", {"exit_signal": 9}, 137, "job/1 Failed (signal 9, SIGKILL)"),
        ("Failed", {"reason": "start_failed"}, 200, "job/1 Failed"),
        ("Cancelled", {"exit_signal": 15}, 201, "job/1 Cancelled (signal 15, SIGTERM)"),
        ("Preempted", {"exit_code": 0}, 202, "job/1 Preempted"),
    ],
)
def test_wait_exits_with_the_jobs_own_code_or_one_for_how_it_ended(
    phase: str, status: dict[str, Any], code: int, said: str
) -> None:
    broker = FakeBroker(job(1, "Running"))
    final = job(1, phase, **status)
    final["metadata"]["resource_version"] = 2
    broker.changes = [{"revision": 6, "kind": "Job", "op": "MODIFIED", "object": final}]

    result = run(broker, "wait", "1")

    assert result.exit_code == code
    assert result.stderr == said + "\n"


def test_wait_timeout_exits_124() -> None:
    result = run(FakeBroker(job(1, "Running")), "wait", "1", "--timeout", "0")

    assert result.exit_code == 124
    assert result.stderr == "job/1 is still Running: the wait timed out\n"


def test_logs_prints_every_chunk() -> None:
    result = run(FakeBroker(job(1)), "logs", "1", "-f")

    assert result.exit_code == 0, result.output
    assert result.stdout == "line one\nline two\n"


def test_events_as_json_are_the_events_jsonl_records() -> None:
    result = run(FakeBroker(job(1)), "events", "--job", "1", "-o", "json")

    assert json.loads(result.stdout) == [
        {"ts": "2025-01-01T00:00:00Z", "event": "job_created", "job": 1},
        {"ts": "2025-01-01T00:00:01Z", "event": "job_started", "job": 1},
    ]


def test_events_are_a_table_for_people() -> None:
    result = run(FakeBroker(job(1)), "events", "--job", "1")

    assert [line.split() for line in result.stdout.splitlines()] == [
        ["TIME", "EVENT", "JOB", "REASON"],
        ["2025-01-01", "00:00:00Z", "job_created", "job/1", "-"],
        ["2025-01-01", "00:00:01Z", "job_started", "job/1", "-"],
    ]


def test_preempt_blockers_names_each_victim() -> None:
    broker = FakeBroker(job(1, worker="gpu-box-1", effective={"priority": 10}), job(2, "Pending"))

    result = run(broker, "preempt-blockers", "2", "--dry-run")

    assert result.stdout.splitlines() == [
        "job/1 vision/j1 (priority 10) on gpu-box-1",
        "would preempt 1 job so job/2 can run on gpu-box-1",
    ]
    assert broker.requests[-1].url.params["dry_run"] == "true"


def test_status_lists_only_converging_jobs() -> None:
    converging = job(1, "Running")
    converging["status"]["desired_phase"] = "Preempted"
    broker = FakeBroker(converging, job(2, "Running"))

    result = run(broker, "status")

    assert [line.split()[:2] for line in result.stdout.splitlines()] == [["1", "Running→Preempted"]]


# -- the grammar -----------------------------------------------------------------------------


def test_a_typod_submit_option_is_refused_and_nothing_is_sent() -> None:
    broker = FakeBroker()

    result = run(broker, "submit", "--namee", "x", "--", "python3", "-c", "print(1)")

    assert result.exit_code == 2
    assert result.stderr == (
        "error: no such option '--namee'. Did you mean '--name'? (see 'cli submit -h')\n"
    )
    assert broker.requests == []


@pytest.mark.parametrize("verb", cli.list_commands(click.Context(cli)))
def test_every_verb_refuses_an_unknown_option(verb: str) -> None:
    broker = FakeBroker(job(1))

    result = run(broker, verb, "--bogus", "1")

    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error: no such option '--bogus'")
    assert len(result.stderr.splitlines()) == 1
    assert broker.requests == []


def test_a_verb_goes_on_past_a_job_it_cannot_act_on_and_exits_1() -> None:
    broker = FakeBroker(job(1), job(2))

    result = run(broker, "cancel", "job/1", "99", "vision/j2")

    assert result.exit_code == 1
    assert result.stdout.splitlines() == [
        "job/1 cancel requested (Running)",
        "job/2 cancel requested (Running)",
    ]
    assert result.stderr == "error: job 99 not found\n"


def test_a_verb_on_jobs_says_which_jobs_are_needed() -> None:
    result = run(FakeBroker(job(1)), "cancel")

    assert result.exit_code == 2
    assert "say which jobs" in result.stderr


def test_a_selector_is_sent_to_the_broker_and_checked_first() -> None:
    broker = FakeBroker(job(1))

    run(broker, "get", "-l", "team=vision,!scratch")
    empty_value = run(broker, "cancel", "-l", "team=")

    assert broker.requests[0].url.params["selector"] == "team=vision,!scratch"
    assert empty_value.exit_code == 0  # `team=` is a selector: team set to the empty value
    bad = run(broker, "cancel", "-l", "=x")
    assert bad.exit_code == 2 and "is not a requirement" in bad.stderr


@pytest.mark.parametrize("phase", ["failed", "FAILED", "Failed"])
def test_phases_are_taken_in_any_case(phase: str) -> None:
    broker = FakeBroker(job(1, "Failed"))

    result = run(broker, "get", "--phase", phase, "-o", "json")

    assert result.exit_code == 0, result.output
    assert broker.requests[0].url.params.get_list("phase") == ["Failed"]
