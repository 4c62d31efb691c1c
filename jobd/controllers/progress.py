"""A job's progress as the broker keeps it: the newest sample, its fraction and its ETA.

The worker sends the newest `jobd-progress` sample of a job at most once a second
(worker/progress.py). Here it becomes `status.progress`: the step, the total and the
metrics as said, `fraction` = step / total (capped at 1), and `eta_s` = the steps left
at the rate seen from the run's first sample to this one. A step below the first one
(the workload started over) starts the rate afresh. Pure: the caller gives the time.
"""

from __future__ import annotations

from datetime import datetime

from jobd.api.models import MAX_INT, Progress
from jobd.api.progress import Sample

__all__ = ["advance", "eta_s", "fraction"]


def advance(previous: Progress | None, sample: Sample, now: datetime) -> Progress:
    """The progress after `sample`, reported at `now`, following `previous` (None: the first)."""
    step, total = sample["step"], sample.get("total")
    first_step, first_at = step, now
    if previous is not None and previous.first_step <= step:
        first_step, first_at = previous.first_step, previous.first_at
    elapsed = (now - first_at).total_seconds()
    return Progress(
        step=step,
        total=total,
        fraction=fraction(step, total),
        eta_s=eta_s(step, total, step - first_step, elapsed),
        metrics=sample.get("metrics") or {},
        updated_at=now,
        first_step=first_step,
        first_at=first_at,
    )


def fraction(step: float, total: float | None) -> float | None:
    """step / total, rounded to 4 places and never above 1; None without a total."""
    if not total:
        return None
    return round(min(step / total, 1.0), 4)


def eta_s(step: float, total: float | None, done: float, elapsed_s: float) -> int | None:
    """Seconds until `total` at `done` steps per `elapsed_s`; None while no rate is known."""
    if not total or done <= 0 or elapsed_s <= 0:
        return None
    left = max(total - step, 0.0)
    return min(round(left * elapsed_s / done), MAX_INT)
