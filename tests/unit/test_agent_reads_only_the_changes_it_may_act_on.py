"""The agent reads a JobView of a watched change only when it could act on it: a job
running here, or one Scheduled (to start). A change of any other job is passed over
unread, so a document it could not even read does no harm; one it may act on is read,
and a document that does not validate still fails loudly."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest

from jobd.wire.informer import Delta
from jobd.worker.agent import Agent
from jobd.worker.execution import Execution
from jobd.worker.jobview import UnreadableJob
from jobd.worker.settings import WorkerSettings


def _agent(tmp_path: Path) -> Agent:
    settings = WorkerSettings(
        name="w1",
        slots=1,
        gpus=[],
        checkpoint_root=tmp_path / "ckpt",
        default_grace_s=60,
        state_dir=tmp_path / "state",
    )
    return Agent("http://127.0.0.1:9", None, settings)


def _unreadable(job_id: int, phase: str) -> dict[str, Any]:
    """A change no job can be read from (no spec), in the given phase."""
    return {"metadata": {"id": job_id}, "status": {"phase": phase, "worker": "w1"}}


@pytest.mark.parametrize("phase", ["Running", "Succeeded", "Failed", "Pending"])
def test_a_change_of_a_job_not_running_here_and_not_to_start_is_not_read(
    tmp_path: Path, phase: str
) -> None:
    agent = _agent(tmp_path)
    agent._on_change(Delta("MODIFIED", _unreadable(7, phase)))  # no model, no error
    assert agent.executions == {}


def test_a_scheduled_job_is_read(tmp_path: Path) -> None:
    with pytest.raises(UnreadableJob):
        _agent(tmp_path)._on_change(Delta("ADDED", _unreadable(7, "Scheduled")))


def test_a_change_of_a_job_running_here_is_read(tmp_path: Path) -> None:
    agent = _agent(tmp_path)
    agent.executions[7] = cast(Execution, object())  # never reached: the read fails first
    with pytest.raises(UnreadableJob):
        agent._on_change(Delta("MODIFIED", _unreadable(7, "Succeeded")))
