"""Samples to figures: percentiles, rates, and the one result shape every scenario reports.

A `Result` is what `jobd bench --json` prints, one line per scenario: the common figures
(`n`, `per_s`, `p50_ms`, `p99_ms`), the target and whether it was met, and any extras the
scenario adds. A figure that does not apply to a scenario is None (JSON null).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

__all__ = ["Result", "Stopwatch", "ms", "parse_ts", "percentile", "rate", "rounded"]


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0..100) by linear interpolation; None without samples."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 3)


def rate(count: int, seconds: float) -> float | None:
    return round(count / seconds, 1) if seconds > 0 and count else None


def rounded(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def parse_ts(text: str) -> float:
    """An RFC 3339 timestamp (`...Z`, as jobd writes them) to Unix seconds."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


@dataclass
class Result:
    """One scenario's figures; `extra` holds whatever else the scenario measured."""

    scenario: str
    n: int = 0
    per_s: float | None = None
    p50_ms: float | None = None
    p99_ms: float | None = None
    target: str = ""
    met: bool | None = None
    size: str = ""
    notes: str = ""
    seconds: float = 0.0
    error: str | None = None
    skipped: bool = False
    extra: dict[str, Any] = field(default_factory=dict)
    details: list[str] = field(default_factory=list)  # extra lines for the table only

    def latencies(self, samples_s: Sequence[float]) -> None:
        """Set p50_ms and p99_ms from samples in seconds."""
        self.p50_ms = ms(percentile(samples_s, 50))
        self.p99_ms = ms(percentile(samples_s, 99))

    def as_json(self) -> dict[str, Any]:
        line: dict[str, Any] = {
            "scenario": self.scenario,
            "n": self.n,
            "per_s": self.per_s,
            "p50_ms": self.p50_ms,
            "p99_ms": self.p99_ms,
            "target": self.target,
            "met": self.met,
            "size": self.size,
            "notes": self.notes,
            "seconds": round(self.seconds, 2),
        }
        if self.error is not None:
            line["error"] = self.error
        if self.skipped:
            line["skipped"] = True
        line.update(self.extra)
        return line


class Stopwatch:
    """Wall time since creation (monotonic), and this process's CPU share over it."""

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.cpu_start = time.process_time()

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def cpu_pct(self) -> float:
        """The bench's own CPU use: near 100 means the client, not the broker, was the limit."""
        wall = self.elapsed()
        return round(100 * (time.process_time() - self.cpu_start) / wall, 1) if wall > 0 else 0.0
