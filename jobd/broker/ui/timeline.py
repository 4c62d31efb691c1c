"""The preemption timeline: each `auto_preempt`, its `checkpoint_complete`, its resume.

Pure: given the events (as the events table holds them) and the jobs they name, pair
each preemption with the checkpoint that answered it (the same `job` and
`candidate_job`, recorded after it) and with the job that resumed the victim (the
victim's `status.resumed_by`; `job resume` also labels the new job `jobd/resumes`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from jobd.store.base import EventRecord

__all__ = ["Preemption", "preemptions"]


@dataclass(frozen=True)
class Preemption:
    decided: EventRecord  # the auto_preempt
    checkpoint: EventRecord | None  # its checkpoint_complete, if the worker saw one
    victim: Mapping[str, Any] | None  # the preempted job's document (None: deleted since)
    resumed: Mapping[str, Any] | None  # the job that resumed it, if any

    @property
    def checkpoint_after_s(self) -> float | None:
        """Seconds from the decision to the checkpoint: how much of the grace it took."""
        if self.checkpoint is None:
            return None
        return (_time(self.checkpoint.ts) - _time(self.decided.ts)).total_seconds()


def preemptions(
    decided: Iterable[EventRecord],
    checkpoints: Iterable[EventRecord],
    jobs: Mapping[int, Mapping[str, Any]],
) -> list[Preemption]:
    """Each preemption in `decided`, newest first, with what followed it."""
    answered: dict[tuple[int | None, Any], list[EventRecord]] = {}
    for event in checkpoints:
        answered.setdefault((event.job, event.fields.get("candidate_job")), []).append(event)
    found = []
    for event in sorted(decided, key=lambda e: e.seq, reverse=True):
        key = (event.job, event.fields.get("candidate_job"))
        later = [c for c in answered.get(key, ()) if c.seq > event.seq]
        victim = jobs.get(event.job) if event.job is not None else None
        resumed_by = ((victim or {}).get("status") or {}).get("resumed_by")
        resumed = jobs.get(resumed_by) if isinstance(resumed_by, int) else None
        found.append(Preemption(event, min(later, key=_seq, default=None), victim, resumed))
    return found


def _seq(event: EventRecord) -> int:
    return event.seq


def _time(ts: str) -> datetime:
    return datetime.fromisoformat(ts.replace("Z", "+00:00"))
