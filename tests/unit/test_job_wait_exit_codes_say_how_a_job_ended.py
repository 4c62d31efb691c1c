"""`job wait`'s exit code: the job's own, 128+N for a signal, jobd's own codes for the rest."""

from __future__ import annotations

from typing import Any

import pytest

from jobd.cli.waiting import EXIT_CANCELLED, EXIT_FAILED, EXIT_PREEMPTED, exit_code_of


def _job(phase: str, **status: Any) -> dict[str, Any]:
    return {"metadata": {"id": 1}, "status": {"phase": phase, **status}}


@pytest.mark.parametrize(
    ("phase", "status", "code"),
    [
        ("Succeeded", {"exit_code": 0}, 0),
        ("Failed", {"exit_code": 3}, 3),
        ("Failed", {"exit_code": 255}, 255),
        ("Failed", {"exit_signal": 15}, 143),
        ("Failed", {"exit_signal": 9, "exit_code": None}, 137),
        ("Failed", {}, EXIT_FAILED),  # could not start, worker lost: no code of its own
        ("Failed", {"exit_code": 0}, EXIT_FAILED),  # ended by jobd though it exited 0
        ("Failed", {"exit_code": -2}, EXIT_FAILED),
        ("Failed", {"exit_code": 300}, EXIT_FAILED),
        ("Cancelled", {"exit_signal": 15}, EXIT_CANCELLED),
        ("Preempted", {"exit_code": 0}, EXIT_PREEMPTED),
        ("Preempted", {"exit_signal": 9}, EXIT_PREEMPTED),
    ],
)
def test_exit_code_of_an_ended_job(phase: str, status: dict[str, Any], code: int) -> None:
    assert exit_code_of(_job(phase, **status)) == code


def test_jobds_own_codes_are_distinct_and_clear_of_signals() -> None:
    ours = [EXIT_FAILED, EXIT_CANCELLED, EXIT_PREEMPTED, 203, 124]
    assert len(set(ours)) == len(ours)
    assert not any(128 < c <= 128 + 64 for c in ours)
