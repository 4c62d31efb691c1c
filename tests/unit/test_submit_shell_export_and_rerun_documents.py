"""What `job submit --shell/--export` and `job rerun` send, built before anything is sent."""

from __future__ import annotations

from typing import Any

import pytest

from jobd.cli.submit import MASKED_VALUE, SubmitError, build_rerun_job, build_submit_job

ENVIRON = {"HOME": "/home/ana", "WANDB_MODE": "offline", "JOBD_TOKEN": "secret", "X": "1"}


def test_shell_runs_through_sh_c() -> None:
    doc = build_submit_job((), shell="python prep.py | gzip > d.gz", cwd="/")
    assert doc["spec"]["command"] == ["sh", "-c", "python prep.py | gzip > d.gz"]


@pytest.mark.parametrize(
    ("command", "shell", "message"),
    [
        (("true",), "echo", "not both"),
        ((), None, "say the command"),
        ((), "  ", "--shell: the command is empty"),
    ],
)
def test_shell_or_a_command_exactly_one(
    command: tuple[str, ...], shell: str | None, message: str
) -> None:
    with pytest.raises(SubmitError, match=message):
        build_submit_job(command, shell=shell, cwd="/")


def test_export_copies_named_variables_and_env_wins() -> None:
    doc = build_submit_job(["true"], export=["WANDB_MODE,X"], env=["X=2"], environ=ENVIRON, cwd="/")
    assert doc["spec"]["env"] == {"WANDB_MODE": "offline", "X": "2"}


def test_export_all_copies_everything_but_the_token() -> None:
    doc = build_submit_job(["true"], export=["ALL"], environ=ENVIRON, cwd="/")
    assert doc["spec"]["env"] == {"HOME": "/home/ana", "WANDB_MODE": "offline", "X": "1"}


def test_no_export_copies_nothing() -> None:
    assert "env" not in build_submit_job(["true"], environ=ENVIRON, cwd="/")["spec"]


@pytest.mark.parametrize(
    ("names", "message"),
    [("NOPE", "NOPE is not set"), ("X,JOBD_TOKEN", "JOBD_TOKEN is jobd's own credential")],
)
def test_export_refuses_what_it_cannot_copy(names: str, message: str) -> None:
    with pytest.raises(SubmitError, match=message):
        build_submit_job(["true"], export=[names], environ=ENVIRON, cwd="/")


def _ended(phase: str = "Failed", **env: str) -> dict[str, Any]:
    return {
        "metadata": {"id": 7, "name": "train", "project": "vision", "labels": {"team": "cv"}},
        "spec": {
            "command": ["python", "train.py"],
            "cwd": "/work",
            "env": env,
            "depends_on": [3],
            "depends_on_any_exit": True,
            "priority": 40,
        },
        "status": {"phase": phase},
    }


def test_rerun_copies_spec_project_and_labels_not_the_dependencies() -> None:
    doc = build_rerun_job(_ended(MODE="x"), name="train-again")

    assert doc["metadata"] == {
        "project": "vision",
        "name": "train-again",
        "labels": {"team": "cv", "jobd/reruns": "7"},
    }
    assert doc["spec"] == {
        "command": ["python", "train.py"],
        "cwd": "/work",
        "env": {"MODE": "x"},
        "priority": 40,
    }


def test_rerun_refuses_a_job_still_running() -> None:
    with pytest.raises(SubmitError, match="job 7 is Running: rerun copies a job that has ended"):
        build_rerun_job(_ended("Running"))


def test_rerun_refuses_masked_values_unless_given_again() -> None:
    job = _ended(API_TOKEN=MASKED_VALUE, MODE="x")
    with pytest.raises(SubmitError, match=r"masked values \(API_TOKEN\).*--env API_TOKEN=VALUE"):
        build_rerun_job(job)

    doc = build_rerun_job(job, env=["API_TOKEN=t0k"])
    assert doc["spec"]["env"] == {"API_TOKEN": "t0k", "MODE": "x"}
