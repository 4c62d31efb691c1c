"""The `job` CLI without a broker: argument parsing, refusals before sending, and rendering."""

from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import click
import httpx
import pytest
from click.testing import CliRunner

from jobd.cli import render
from jobd.cli.job_main import Settings, cli
from jobd.cli.progress_footer import ProgressFooter
from jobd.cli.submit import SubmitError, build_submit_job

NOW = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)
CLOSED = "http://127.0.0.1:9"  # the discard port: nothing listens there
VERBS = cli.list_commands(click.Context(cli))  # every verb, those loaded lazily too


def job_doc(id_: int, phase: str, desired: str = "Running", **status: Any) -> dict[str, Any]:
    created = (NOW - timedelta(minutes=5)).isoformat()
    return {
        "apiVersion": "jobd/v1",
        "kind": "Job",
        "metadata": {"id": id_, "name": f"j{id_}", "project": "vision", "created_at": created},
        "spec": {"command": ["python", "train.py", "--lr", "3e-4"], "resources": {"gpus": 1}},
        "status": {
            "phase": phase,
            "desired_phase": desired,
            "effective": {"priority": 60},
            **status,
        },
    }


def run(*args: str, transport: httpx.BaseTransport | None = None) -> Any:
    return CliRunner().invoke(cli, list(args), obj=Settings(transport=transport))


# -- submit ----------------------------------------------------------------------------------


def test_submit_builds_only_what_was_said() -> None:
    doc = build_submit_job(["python", "train.py"], cwd="/work")

    assert doc == {
        "apiVersion": "jobd/v1",
        "kind": "Job",
        "metadata": {"project": "default"},
        "spec": {"command": ["python", "train.py"], "cwd": "/work"},
    }


def test_submit_maps_every_flag() -> None:
    doc = build_submit_job(
        ["python", "train.py", "--lr", "3e-4"],
        project="long-training",
        cwd="/work",
        name="resnet",
        priority=60,
        preemptible=False,
        checkpoint_grace=300,
        gpus=2,
        depends_on=["12", "prep-data"],
        depends_on_any_exit=True,
        env=["WANDB_MODE=offline", "EQ=a=b"],
        resume_from="/ckpt/7",
    )

    assert doc["metadata"] == {"project": "long-training", "name": "resnet"}
    assert doc["spec"] == {
        "command": ["python", "train.py", "--lr", "3e-4"],
        "cwd": "/work",
        "env": {"WANDB_MODE": "offline", "EQ": "a=b", "RESUME_FROM": "/ckpt/7"},
        "priority": 60,
        "preemptible": False,
        "checkpoint_grace_s": 300,
        "resources": {"gpus": 2},
        "depends_on": [12, "prep-data"],
        "depends_on_any_exit": True,
    }


def test_submit_sends_cwd_as_an_absolute_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)

    doc = build_submit_job(["true"], cwd="sub")

    assert doc["spec"]["cwd"] == str(tmp_path / "sub")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"checkpoint_grace": 301}, "--checkpoint-grace 301 s is over the 300 s cap"),
        ({"priority": -1}, "--priority: Input should be greater than or equal to 0"),
        ({"env": ["NOEQUALS"]}, "--env expects KEY=VALUE, got 'NOEQUALS'"),
        ({"name": "Bad Name"}, "--name: must be 1-63 lowercase letters"),
        ({"cpus": -1}, "--cpus: Input should be greater than or equal to 0.001"),
        ({"memory": "0"}, "--memory: '0': a size must be more than 0 bytes"),
        ({"selector": ["gpu=a=b"]}, "--selector: gpu: 'a=b' is not a label value"),
        ({"selector": ["gpu"]}, "--selector expects KEY=VALUE, got 'gpu'"),
        ({"worker": "Bad!"}, "--worker: 'Bad!' is not a worker name"),
    ],
)
def test_submit_refuses_bad_flags_naming_the_flag(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(SubmitError, match=message):
        build_submit_job(["true"], cwd="/", **kwargs)


def test_submit_grace_over_the_cap_is_refused_before_sending() -> None:
    sent: list[httpx.Request] = []
    transport = httpx.MockTransport(lambda r: sent.append(r) or httpx.Response(500))

    result = run("submit", "--checkpoint-grace", "400", "--", "python", "t.py", transport=transport)

    assert result.exit_code == 1
    assert result.stderr == (
        "error: --checkpoint-grace 400 s is over the 300 s cap on checkpoint grace\n"
    )
    assert sent == []


def test_submit_keeps_the_commands_own_flags() -> None:
    sent: list[dict[str, Any]] = []

    def broker(request: httpx.Request) -> httpx.Response:
        import json

        sent.append(json.loads(request.content))
        return httpx.Response(201, json={**sent[-1], "metadata": {"id": 41, "name": "x"}})

    result = run(
        "submit",
        "-p",
        "vision",
        "--gpus",
        "1",
        "python",
        "t.py",
        "--lr",
        "3",
        "-p",
        "x",
        transport=httpx.MockTransport(broker),
    )

    assert result.exit_code == 0, result.output
    assert result.stdout == "41\n"
    assert sent[0]["spec"]["command"] == ["python", "t.py", "--lr", "3", "-p", "x"]
    assert sent[0]["metadata"]["project"] == "vision"


# -- apply -----------------------------------------------------------------------------------

BAD_JOB = """\
apiVersion: jobd/v1
kind: Job
metadata:
  name: train
  project: vision
spec:
  priority: -5
  command: [python, train.py]
"""


def test_apply_refuses_a_malformed_manifest_with_file_line_and_field(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "job.yaml").write_text(BAD_JOB)
    sent: list[httpx.Request] = []
    transport = httpx.MockTransport(lambda r: sent.append(r) or httpx.Response(500))
    monkeypatch.chdir(tmp_path)

    result = run("apply", "-f", "job.yaml", transport=transport)

    assert result.exit_code == 1
    assert result.stderr == (
        "error: job.yaml:7: spec.priority: Input should be greater than or equal to 0\n"
    )
    assert result.stdout == ""
    assert sent == []


def test_diff_errors_exit_above_one(tmp_path: Path) -> None:
    (tmp_path / "job.yaml").write_text(BAD_JOB)

    result = run("diff", "-f", str(tmp_path / "job.yaml"))

    assert result.exit_code == 2
    assert result.stderr.startswith("error: ")


# -- errors ----------------------------------------------------------------------------------


@pytest.mark.parametrize("args", [["get"], ["workers"], ["describe", "7"], ["wait", "7"]])
def test_unreachable_broker_is_one_sentence_and_exit_1(args: list[str]) -> None:
    result = CliRunner().invoke(cli, ["--server", CLOSED, *args])

    assert result.exit_code == 1
    assert result.stderr == (
        f"error: cannot reach the jobd broker at {CLOSED} (is `jobd dev` running?)\n"
    )
    assert "Traceback" not in result.output


@pytest.mark.parametrize("verb", VERBS)
def test_every_verb_has_help(verb: str) -> None:
    result = CliRunner().invoke(cli, [verb, "--help"])

    assert result.exit_code == 0
    assert f"Usage: cli {verb}" in result.stdout
    command = cli.get_command(click.Context(cli), verb)
    assert command is not None and command.help


def test_the_contracts_verbs_all_exist() -> None:
    assert set(VERBS) >= {
        "apply",
        "diff",
        "submit",
        "get",
        "describe",
        "status",
        "logs",
        "events",
        "preempt",
        "preempt-blockers",
        "cancel",
        "delete",
        "wait",
        "workers",
        "resume",
        "rerun",
        "cordon",
        "uncordon",
        "drain",
    }


# -- rendering -------------------------------------------------------------------------------


def test_jobs_table_shows_convergence_only_for_live_jobs() -> None:
    jobs = [
        job_doc(7, "Running", "Preempted", worker="gpu-box-1", gpus=[0]),
        job_doc(8, "Failed", "Running", exit_code=3),
        job_doc(9, "Pending"),
    ]

    lines = render.to_text(render.jobs_table(jobs, now=NOW)).splitlines()

    assert lines[0].split() == ["ID", "NAME", "PHASE", "PRIO", "WORKER", "PROGRESS", "AGE"]
    assert lines[1].split() == [
        "7",
        "vision/j7",
        "Running→Preempted",
        "60",
        "gpu-box-1",
        "-",
        "5m0s",
    ]
    assert lines[2].split() == ["8", "vision/j8", "Failed", "60", "-", "-", "5m0s"]
    assert lines[3].split()[2] == "Pending→Running"
    assert all(line == line.rstrip() for line in lines)


def test_wide_table_adds_desired_gpus_exit_and_command() -> None:
    jobs = [job_doc(7, "Running", worker="w", gpus=[0, 1]), job_doc(8, "Failed", exit_code=3)]
    jobs.append(job_doc(9, "Pending"))
    jobs[2]["spec"]["resources"] = {"gpus": 2, "gpu_memory": 40 << 30}

    lines = render.to_text(render.jobs_table(jobs, wide=True, now=NOW)).splitlines()

    assert lines[0].split()[7:] == ["ETA", "DESIRED", "NODES", "GPUS", "EXIT", "COMMAND"]
    shown = ["Running", "1", "0,1", "-", "python", "train.py", "--lr", "3e-4"]
    assert lines[1].split()[8:] == shown
    assert lines[2].split()[8:12] == ["Running", "1", "(1)", "3"]
    assert lines[3].split()[10] == "(2x40GiB)"


def test_progress_shows_step_total_percent_and_eta() -> None:
    progress = {"step": 120, "total": 4000, "fraction": 0.03, "eta_s": 5400, "metrics": {}}
    running = job_doc(7, "Running", worker="w", progress=progress)
    open_ended = job_doc(8, "Running", worker="w", progress={"step": 2.5, "metrics": {}})
    jobs = [running, open_ended, job_doc(9, "Pending")]

    lines = render.to_text(render.jobs_table(jobs, wide=True, now=NOW)).splitlines()

    assert " PROGRESS " in lines[0] and " ETA " in lines[0]
    assert "  120/4000 3%  5m0s  1h30m  Running" in lines[1]
    assert lines[2].split()[5:8] == ["2.5", "5m0s", "-"]
    assert lines[3].split()[5:8] == ["-", "5m0s", "-"]
    assert render.watch_line("MODIFIED", running, now=NOW).endswith("progress=120/4000 3%")


def test_status_line_says_what_a_job_waits_for_and_how_long() -> None:
    queued = (NOW - timedelta(minutes=2, seconds=10)).isoformat()
    job = job_doc(7, "Pending", queued_at=queued)

    assert render.status_line(job, now=NOW) == "7 Pending→Running 2m10s waiting for capacity"


def test_an_unschedulable_job_says_why_it_waits() -> None:
    queued = (NOW - timedelta(seconds=8)).isoformat()
    said = "no worker has 5 GPUs; the largest has 4"
    condition = {"type": "Scheduled", "status": "False", "reason": "Unschedulable"}
    job = job_doc(7, "Pending", queued_at=queued, conditions=[{**condition, "message": said}])

    assert render.unschedulable(job) == said
    assert render.status_line(job, now=NOW) == f"7 Pending→Running 8s unschedulable: {said}"
    assert render.unschedulable(job_doc(8, "Pending", queued_at=queued)) is None


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(-3, "0s"), (45, "45s"), (130, "2m10s"), (3 * 3600 + 240, "3h4m"), (2 * 86400 + 7200, "2d2h")],
)
def test_ages_are_compact(seconds: float, text: str) -> None:
    assert render.format_age(seconds) == text


def test_workers_table() -> None:
    renewed = (NOW - timedelta(seconds=3)).isoformat()
    worker = {
        "metadata": {"name": "gpu-box-1"},
        "spec": {"slots": 4, "gpus": [0, 1, 2, 3]},
        "status": {"phase": "Ready", "last_renewal": renewed, "jobs": [7, 9]},
    }
    cpu_job = job_doc(7, "Running", worker="gpu-box-1")
    cpu_job["spec"]["resources"] = {}
    gpu_job = job_doc(9, "Running", worker="gpu-box-1")
    gpu_job["spec"]["resources"] = {"gpus": 1}
    gpu_job["status"]["gpus"] = [2]

    text = render.to_text(render.workers_table([worker], [cpu_job, gpu_job], now=NOW))

    assert text.splitlines()[1].split() == [
        "gpu-box-1",
        "Ready",
        "1/4",
        "0(-),1(-),2(9),3(-)",
        "3s",
        "ago",
        "7,9",
    ]


def test_workers_table_shows_each_gpus_memory_and_foreign_use() -> None:
    gib = 1 << 30
    worker = {
        "metadata": {"name": "w1"},
        "spec": {"slots": 2, "gpus": [0, 1], "gpu_memory": {"0": 24 * gib, "1": 80 * gib}},
        "status": {
            "phase": "Ready",
            "last_renewal": NOW.isoformat(),
            "gpu_memory_foreign": {"1": 6 * gib},
        },
    }
    job = job_doc(3, "Running", worker="w1")
    job["spec"]["resources"] = {"gpus": 1, "gpu_memory": 40 * gib}
    job["status"]["gpus"] = [0]

    plain = render.to_text(render.workers_table([worker], [job], now=NOW)).splitlines()[1]
    wide = render.to_text(render.workers_table([worker], [job], now=NOW, wide=True)).splitlines()[1]

    assert "0:24GiB(3),1:80GiB(-)" in plain.split()
    assert "0:24GiB(3),1:80GiB(-,6GiB" in wide.split()


def test_wide_workers_table_says_how_limits_are_enforced() -> None:
    enforced = {"cpu": "affinity", "memory": "cgroup-v1"}
    newer = {"metadata": {"name": "w1"}, "spec": {"enforcement": enforced}, "status": {}}
    older = {"metadata": {"name": "w2"}, "spec": {}, "status": {}}

    lines = render.to_text(render.workers_table([newer, older], [], now=NOW, wide=True))
    header, first, second = lines.splitlines()

    assert "LIMITS" in header.split()
    assert "affinity,cgroup-v1" in first.split()
    assert "affinity" not in second and "cgroup" not in second


def test_victim_line() -> None:
    victim = job_doc(12, "Running", worker="gpu-box-1")

    assert render.victim_line(victim) == "job/12 vision/j12 (priority 60) on gpu-box-1"


def test_a_gang_victims_line_names_every_members_worker() -> None:
    victim = job_doc(12, "Running", worker="gpu-box-1")
    victim["status"]["members"] = [
        {"rank": 1, "worker": "gpu-box-2", "phase": "Running"},
        {"rank": 0, "worker": "gpu-box-1", "phase": "Running"},
    ]

    line = render.victim_line(victim)

    assert line == "job/12 vision/j12 (priority 60) on gpu-box-1, gpu-box-2"


def test_event_line_is_the_events_jsonl_line() -> None:
    event = {"ts": "2025-01-01T12:00:00Z", "event": "job_created", "job": 7, "seq": 3}

    assert render.event_line(event) == '{"ts":"2025-01-01T12:00:00Z","event":"job_created","job":7}'


# -- diff ------------------------------------------------------------------------------------


def test_diff_of_a_new_object_is_all_additions() -> None:
    applied = job_doc(7, "Pending")

    text = render.diff_text(None, applied, "Job", "vision/j7")

    lines = text.splitlines()
    assert lines[:2] == ["--- live/job/vision/j7", "+++ applied/job/vision/j7"]
    assert all(line.startswith(("+", "@@", "---")) for line in lines)
    assert "+  name: j7" in lines


def test_diff_of_equal_objects_is_empty_and_ignores_status() -> None:
    live, applied = job_doc(7, "Running"), job_doc(7, "Pending")

    assert render.diff_text(live, applied, "Job", "vision/j7") == ""


def test_diff_shows_the_changed_field() -> None:
    live, applied = job_doc(7, "Running"), job_doc(7, "Running")
    applied["spec"]["priority"] = 80

    text = render.diff_text(live, applied, "Job", "vision/j7")

    assert "+  priority: 80" in text.splitlines()
    assert not [line for line in text.splitlines() if line.startswith("-  ")]


def test_the_logs_footer_redraws_progress_only_where_a_line_ended() -> None:
    progress = {"step": 50, "total": 100, "fraction": 0.5, "eta_s": 30, "metrics": {"loss": 0.2}}
    reads: list[int] = []

    class Broker:
        def get_job(self, job_id: int) -> dict[str, Any]:
            reads.append(job_id)
            return job_doc(job_id, "Running", progress=progress)

    stream = io.StringIO()
    footer = ProgressFooter(Broker(), 7, stream)  # type: ignore[arg-type]
    footer.draw(at_line_start=False)
    assert stream.getvalue() == ""  # never after a partial line: erasing it would lose it
    footer.draw(at_line_start=True)
    footer.clear()
    footer.clear()
    line = "50/100 50% [██████████          ] eta 30s loss=0.2"
    assert stream.getvalue() == f"{line}\r\x1b[2K"
    assert reads == [7]  # read once a second at most, however often drawn


def test_a_pending_jobs_worker_cell_says_why_it_waits_as_squeue_does() -> None:
    waiting = {"type": "Scheduled", "status": "False", "reason": "WaitingForCapacity"}
    capped = {"type": "Scheduled", "status": "False", "reason": "ArrayParallelism"}
    jobs = [
        job_doc(1, "Pending", conditions=[waiting]),
        job_doc(2, "Pending", conditions=[capped]),
        job_doc(3, "Pending", dependencies_met=False),
        job_doc(4, "Pending", retry_at=NOW.isoformat()),
        job_doc(5, "Pending"),
        job_doc(6, "Running", worker="w", conditions=[{**waiting, "status": "True"}]),
    ]
    for wide in (False, True):
        rows = render.to_text(render.jobs_table(jobs, wide=wide, now=NOW)).splitlines()[1:]
        assert [row.split()[4] for row in rows] == [
            "(WaitingForCapacity)",
            "(ArrayParallelism)",
            "(WaitingForDependencies)",
            "(RetryBackoff)",
            "(WaitingForCapacity)",  # admitted ready: no condition yet, it waits for room
            "w",
        ]
