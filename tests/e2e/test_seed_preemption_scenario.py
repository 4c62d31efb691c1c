"""The seed's scenario end to end, with the sweeper's thresholds shortened by configuration.

A preemptible low-priority training run (preemptible through its project's default) holds
the only slot; a higher-priority job queues; after the queued threshold the sweeper
preempts the run, which checkpoints in its grace window; the events pair up; the victim
ends Preempted and is not re-queued; its child is cancelled, its any-exit child runs;
the queued job runs; and `job resume` continues the run to the uninterrupted result.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.harness import REPO, Jobd, manifest, start_jobd, stop_jobd

PROJECTS = """\
projects:
  long-training:
    priority: 10
    defaults:
      preemptible: true
      checkpoint_grace_s: 20
  urgent:
    priority: 60
  batch:
    priority: 10
"""
TRAIN = [sys.executable, str(REPO / "examples" / "train_numpy.py")]


@pytest.fixture(scope="module")
def sweeping(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Jobd]:
    root = tmp_path_factory.mktemp("seed")
    (root / "projects.yaml").write_text(PROJECTS)
    running = start_jobd(
        root,
        "--slots",
        "1",
        "--projects",
        str(root / "projects.yaml"),
        "--auto-preempt-queued",
        "1",
        "--auto-preempt-min-runtime",
        "1",
    )
    yield running
    stop_jobd(running)


def _uninterrupted_result(tmp: Path) -> dict[str, object]:
    env = dict(os.environ, JOBD_CHECKPOINT_DIR=str(tmp) + "/", TRAIN_STEP_SLEEP="0")
    env.pop("RESUME_FROM", None)
    out = subprocess.run(TRAIN, env=env, capture_output=True, text=True, check=True, timeout=60)
    line = next(x for x in out.stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line.removeprefix("RESULT "))  # type: ignore[no-any-return]


def test_the_seed_scenario(sweeping: Jobd, tmp_path: Path) -> None:
    jobd = sweeping
    victim_doc = manifest(
        "train", TRAIN, project="long-training", env={"TRAIN_STEP_SLEEP": "0.004"}
    )
    children = [
        manifest(
            "evaluate",
            [sys.executable, "-c", "print('eval')"],
            project="long-training",
            depends_on=["train"],
        ),
        manifest(
            "notify",
            [sys.executable, "-c", "print('notify')"],
            project="long-training",
            depends_on=["train"],
            depends_on_any_exit=True,
        ),
    ]
    jobd.ok("apply", "-f", "-", input="\n---\n".join([victim_doc, *children]))
    victim = jobd.wait_phase("long-training/train", "Running")
    victim_id = victim["metadata"]["id"]
    assert victim["status"]["effective"]["preemptible"] is True  # from the project default
    urgent_id = int(
        jobd.ok(
            "submit",
            "-p",
            "urgent",
            "--name",
            "hotfix",
            "--",
            sys.executable,
            "-c",
            "print('urgent ran')",
        ).strip()
    )

    assert jobd.wait_phase(urgent_id, "Succeeded", timeout=40)["status"]["exit_code"] == 0
    victim = jobd.wait_phase(victim_id, "Preempted")
    assert victim["status"]["desired_phase"] == "Preempted"

    preempts = jobd.events(event="auto_preempt", job=victim_id)
    checkpoints = jobd.events(event="checkpoint_complete", job=victim_id)
    assert len(preempts) == 1 and len(checkpoints) == 1
    assert preempts[0]["candidate_job"] == urgent_id == checkpoints[0]["candidate_job"]
    assert preempts[0]["reason"] == "sweeper"
    assert (preempts[0]["priority"], preempts[0]["candidate_priority"]) == (10, 60)
    assert checkpoints[0]["worker"] == "w1"
    lines = [json.loads(x) for x in (jobd.root / "logs" / "events.jsonl").read_text().splitlines()]
    assert lines.index(preempts[0]) < lines.index(checkpoints[0])

    assert (
        jobd.wait_phase("long-training/evaluate", "Cancelled")["status"]["reason"]
        == "dependency_failed"
    )
    assert jobd.wait_phase("long-training/notify", "Succeeded")["status"]["exit_code"] == 0

    ckpt_dir = jobd.root / "ckpt" / str(victim_id)
    assert stat.S_IMODE(ckpt_dir.stat().st_mode) == 0o700
    assert (ckpt_dir / "latest.npz").is_file()

    # Not re-queued: the victim stays Preempted and no job was created for it.
    time.sleep(0.5)
    assert jobd.get(victim_id)["status"]["phase"] == "Preempted"
    assert len(jobd.events(event="job_created")) == 4

    describe = jobd.ok("describe", str(victim_id))
    assert "auto_preempt" in describe and "checkpoint_complete" in describe

    resumed_id = int(jobd.ok("resume", str(victim_id)).strip())
    resumed = jobd.get(resumed_id)
    assert resumed["spec"]["env"]["RESUME_FROM"] == str(ckpt_dir / "latest.npz")
    assert resumed["metadata"]["labels"]["jobd/resumes"] == str(victim_id)
    assert jobd.wait_phase(resumed_id, "Succeeded", timeout=60)["status"]["exit_code"] == 0
    result = json.loads((jobd.root / "ckpt" / str(resumed_id) / "result.json").read_text())
    assert result == _uninterrupted_result(tmp_path)


def test_a_job_that_is_not_preemptible_is_never_auto_preempted(sweeping: Jobd) -> None:
    jobd = sweeping
    holder = int(
        jobd.ok(
            "submit",
            "-p",
            "batch",
            "--no-preemptible",
            "--",
            sys.executable,
            "-c",
            "import time; time.sleep(30)",
        ).strip()
    )
    jobd.wait_phase(holder, "Running")
    waiting = int(jobd.ok("submit", "-p", "urgent", "--", sys.executable, "-c", "pass").strip())
    time.sleep(3)  # well past both one-second thresholds
    assert jobd.get(holder)["status"]["phase"] == "Running"
    assert jobd.get(waiting)["status"]["phase"] == "Pending"
    assert not jobd.events(event="auto_preempt", job=holder)
    jobd.ok("cancel", str(holder))
    assert jobd.wait_phase(waiting, "Succeeded")["status"]["exit_code"] == 0
