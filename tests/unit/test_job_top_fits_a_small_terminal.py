"""`job top`'s frame fits the terminal it is drawn on: at 80x24 (plain SSH) a busy cluster
takes every line and no more, each row one line, the sections sharing the height and saying
how many rows they left out; and its keys select jobs, type a project and quit."""

from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta
from typing import Any

from rich.console import Console

from jobd.cli.top import keys_of, press
from jobd.cli.top_view import (
    CHROME_LINES,
    Screen,
    Snapshot,
    allot,
    frame,
    pending_reason,
    selectable,
)

NOW = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
GIB = 1 << 30


def _ts(seconds_ago: float) -> str:
    return (NOW - timedelta(seconds=seconds_ago)).isoformat()


def _job(job_id: int, phase: str, **status: Any) -> dict[str, Any]:
    return {
        "metadata": {"id": job_id, "name": f"sweep-lr-{job_id}-long-name", "project": "vision"},
        "spec": {"resources": {"gpus": len(status.get("gpus", []))}},
        "status": {"phase": phase, "desired_phase": phase, **status},
    }


def _busy() -> Snapshot:
    worker = {
        "metadata": {"name": "gpu-box-1.example.org"},
        "spec": {
            "slots": 4,
            "gpus": [0, 1, 2, 3],
            "gpu_memory": {str(g): 80 * GIB for g in range(4)},
        },
        "status": {
            "phase": "Ready",
            "gpu_usage": {"0": {"memory_used": 71 * GIB, "utilization": 0.97}},
        },
    }
    progress = {"step": 1200, "total": 4000, "fraction": 0.3, "eta_s": 5400}
    running = [
        _job(
            i,
            "Running",
            worker="gpu-box-1.example.org",
            gpus=[i],
            progress=progress,
            started_at=_ts(600),
        )
        for i in range(4)
    ]
    unschedulable = {
        "type": "Scheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": "no worker has 1 GPU with 90GiB each",
    }
    queued = [_job(100 + i, "Pending", queued_at=_ts(30)) for i in range(40)]
    queued[0]["status"]["conditions"] = [unschedulable]
    preemptions = [
        {
            "ts": _ts(60 - i),
            "event": "auto_preempt",
            "job": i,
            "candidate_job": 100,
            "reason": "sweeper",
        }
        for i in range(8)
    ]
    return Snapshot(
        workers=[worker],
        running=running,
        holders=running,
        queued=queued,
        queued_total=40,
        preemptions=preemptions,
    )


def _lines(snapshot: Snapshot, screen: Screen) -> list[str]:
    console = Console(
        width=screen.width, height=screen.height, file=io.StringIO(), color_system=None
    )
    with console.capture() as capture:
        console.print(frame(snapshot, screen, NOW))
    return capture.get().splitlines()


def test_a_busy_cluster_fills_80x24_exactly_one_line_a_row() -> None:
    lines = _lines(_busy(), Screen(width=80, height=24, server="http://broker:8765"))
    assert len(lines) == 24, "\n".join(lines)
    assert max(len(line) for line in lines) <= 80
    text = "\n".join(lines)
    assert "gpu-box-1" in text and "71GiB/80GiB" in text and "97%" in text
    assert "1200/4000 30%" in text and "1h30m" in text  # progress and ETA
    assert "QUEUED 40" in text and "unschedulable: no worker has" in text
    assert "38 more" in text and "6 more" in text, "a section cut short says what it left out"
    assert lines[-1].startswith("q quit")


def test_sections_share_the_height_by_what_they_want() -> None:
    assert allot([4, 4, 40, 8], 24 - CHROME_LINES) == [4, 4, 3, 3]
    assert allot([1, 0, 40, 0], 14) == [1, 0, 13, 0]
    assert allot([2, 2, 2, 2], 100) == [2, 2, 2, 2]
    assert allot([5, 5], -3) == [0, 0]


def test_a_narrower_terminal_drops_columns_before_cutting_rows() -> None:
    wide = "\n".join(_lines(_busy(), Screen(width=120, height=40)))
    narrow = _lines(_busy(), Screen(width=60, height=24))
    assert "PHASE" in wide and "AGE" in wide
    assert max(len(line) for line in narrow) <= 60
    assert "AGE" not in "\n".join(narrow) and "PROGRESS" in "\n".join(narrow)


def test_keys_select_jobs_open_logs_type_a_project_and_quit() -> None:
    snapshot = _busy()
    jobs = selectable(snapshot)
    assert jobs[:5] == [0, 1, 2, 3, 100], "running first, then the queue in its order"
    screen = Screen(selected=0)
    for key in keys_of("\x1b[B\x1b[Bj"):
        assert press(screen, key, jobs) is None
    assert screen.selected == 3
    assert [press(screen, k, jobs) for k in keys_of("\x1b[Ak")] == [None, None]
    assert screen.selected == 1
    assert press(screen, "enter", jobs) == "logs" and press(screen, "l", jobs) == "logs"

    assert [press(screen, k, jobs) for k in keys_of("pvisx\x7fion\r")][-1] == "refresh"
    assert screen.project == "vision" and screen.prompt is None
    for key in keys_of("pother\x1b"):
        press(screen, key, jobs)
    assert screen.project == "vision", "Esc keeps the project shown"
    press(screen, "p", jobs)
    assert press(screen, "enter", jobs) == "refresh" and screen.project is None
    assert press(screen, "q", jobs) == "quit"


def test_unknown_escape_sequences_are_no_keys() -> None:
    assert keys_of("\x1b[15~q") == ["q"]  # F5, then q
    assert keys_of("\x1bOA\n") == ["up", "enter"]


def test_a_queued_job_says_why_it_waits() -> None:
    def scheduled_false(reason: str, message: str) -> dict[str, Any]:
        return {"type": "Scheduled", "status": "False", "reason": reason, "message": message}

    quota = scheduled_false("QuotaExceeded", "project vision uses 8 of 8 GPUs")
    assert pending_reason(_job(1, "Pending", conditions=[quota])) == (
        "QuotaExceeded: project vision uses 8 of 8 GPUs"
    )
    unschedulable = scheduled_false("Unschedulable", "no worker has 2 GPUs")
    assert pending_reason(_job(2, "Pending", conditions=[unschedulable])) == (
        "unschedulable: no worker has 2 GPUs"
    )
    assert pending_reason(_job(3, "Pending")) == "waiting for capacity"
    assert pending_reason(_job(4, "Pending", dependencies_met=False)) == "waiting for dependencies"
