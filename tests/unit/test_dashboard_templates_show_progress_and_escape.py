"""The dashboard's fragments, rendered from job documents as the API answers them: a
progress bar where `status.progress` is present (and none where it is not), a converging
row where desired and observed differ, and everything a user wrote escaped."""

from __future__ import annotations

from typing import Any

from jobd.broker.ui.rendering import duration, fragment


def _job(**status: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "id": 7,
            "name": "<b>bold</b>",
            "project": "vision",
            "labels": {"team": "<i>x</i>"},
            "created_at": "2026-12-04T10:00:00Z",
        },
        "status": {"desired_phase": "Running", "phase": "Running", "attempt": 1, **status},
    }


def test_a_progress_bar_only_where_the_job_reports_progress() -> None:
    progress = {
        "step": 120,
        "total": 4000,
        "fraction": 0.03,
        "eta_s": 5400,
        "metrics": {"loss": 0.31},
    }
    live = fragment("_job_live.html", job=_job(progress=progress), events=[])
    assert '<progress max="1" value="0.03">' in live
    assert "step 120/4000" in live and "ETA 1h" in live and "loss=0.31" in live
    assert "<progress" not in fragment("_job_live.html", job=_job(), events=[])


def test_rows_mark_convergence_and_escape_what_users_wrote() -> None:
    rows = fragment("_jobs_rows.html", jobs=[_job(phase="Pending")], more=0)
    assert 'class="job converging"' in rows
    assert "<b>" not in rows and "&lt;b&gt;bold&lt;/b&gt;" in rows
    assert "team=&lt;i&gt;x&lt;/i&gt;" in rows
    assert 'class="job converging"' not in fragment("_jobs_rows.html", jobs=[_job()], more=0)


def test_durations_read_as_job_get_shows_ages() -> None:
    assert [duration(s) for s in (None, 5, 300, 7200, 200000)] == ["-", "5s", "5m", "2h", "2d"]


def test_the_workers_page_shows_each_gpus_memory_and_cpu_slots_apart() -> None:
    worker = {
        "doc": {
            "metadata": {"name": "gpu-box"},
            "spec": {"slots": 2, "gpus": [0, 1], "gpu_memory": {"0": 24 << 30, "1": 80 << 30}},
            "status": {"phase": "Ready", "last_renewal": "2026-12-04T10:00:00Z"},
        },
        "jobs": [],
        "others": 0,
        "slots_used": 1,
        "gpus_used": [1],
    }
    html = fragment("workers.html", who=None, workers=[worker])
    assert "CPU slots" in html and "1/2" in html
    assert ">0:24GiB</span>" in html and ">1:80GiB</span>" in html
    assert 'class="gpu busy" title="in use">1:80GiB' in html
