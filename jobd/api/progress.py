"""What a `jobd-progress {json}` line may say, and how one is read (standard library only).

A workload reports its progress on stdout, one line each, `jobd.client.report_progress()`
or by hand: `jobd-progress {"step": 120, "total": 4000, "loss": 0.31}`. `step` (a finite
number >= 0) is required; `total` (> 0) is optional; every other key is a metric. The
worker reads the lines (worker/progress.py) and sends the newest to the broker, which
keeps it as `status.progress` (controllers/progress.py adds the fraction and the ETA).

Whatever a workload prints, a line is either read whole or ignored: bad JSON, not an
object, no usable `step`, or longer than `MAX_LINE_BYTES`. Metrics are bounded: the first
`MAX_METRICS` keys of at most `MAX_METRIC_KEY` characters; a value is kept when it is a
finite number or a string of at most `MAX_METRIC_TEXT` characters (truncated to that),
anything else (NaN, infinity, booleans, null, lists, objects) is dropped.
"""

from __future__ import annotations

import json
import math
from typing import Any, TypeGuard

from jobd.client import PROGRESS_MARKER as MARKER

__all__ = [
    "MARKER",
    "MAX_LINE_BYTES",
    "MAX_METRICS",
    "MAX_METRIC_KEY",
    "MAX_METRIC_TEXT",
    "Sample",
    "parse_line",
    "sample_of",
]

MAX_LINE_BYTES = 4096
MAX_METRICS = 32
MAX_METRIC_KEY = 64
MAX_METRIC_TEXT = 128
# Integers past this are dropped: a float64 (Prometheus, JavaScript) holds them inexactly,
# and a huge one (JSON allows any) could not be converted at all.
_MAX_EXACT = 2**53 - 1

# One report: {"step": ..., "total": ... (may be absent), "metrics": {...}}
Sample = dict[str, Any]
_PREFIX = MARKER.encode("ascii") + b" "


def parse_line(line: bytes) -> Sample | None:
    """The sample of one stdout line (without its newline), or None when it says none."""
    if not line.startswith(_PREFIX) or len(line) > MAX_LINE_BYTES:
        return None
    try:
        said = json.loads(line[len(_PREFIX) :])
    except (ValueError, RecursionError):  # bad JSON, bad UTF-8, absurd nesting
        return None
    return sample_of(said) if isinstance(said, dict) else None


def sample_of(said: dict[str, Any]) -> Sample | None:
    """A sample from a decoded object: `step`, optional `total`, bounded metrics."""
    step, total = said.get("step"), said.get("total")
    if not _number(step) or step < 0:
        return None
    sample: Sample = {"step": step}
    if _number(total) and total > 0:
        sample["total"] = total
    metrics: dict[str, float | int | str] = {}
    for key, value in said.items():
        if len(metrics) == MAX_METRICS:
            break
        if key in ("step", "total") or not 0 < len(key) <= MAX_METRIC_KEY:
            continue
        if _number(value):
            metrics[key] = value
        elif isinstance(value, str):
            metrics[key] = value[:MAX_METRIC_TEXT]
    sample["metrics"] = metrics
    return sample


def _number(value: Any) -> TypeGuard[int | float]:
    """A finite int or float (JSON's true and false are not numbers here)."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return abs(value) <= _MAX_EXACT
    return isinstance(value, float) and math.isfinite(value)
