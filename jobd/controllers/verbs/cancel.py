"""`job cancel`: desired phase Cancelled, and an end at once for a job nothing runs.

A job that runs gets `signal=cancel`; its worker stops it and reports `stopping`, then
`complete` (verbs/reports.py), which ends it Cancelled.
"""

from __future__ import annotations

from jobd.api.models import Job
from jobd.controllers import transitions
from jobd.controllers.context import Context

__all__ = ["cancel"]


def cancel(ctx: Context, job: Job, reason: str = "user") -> Job:
    job, events = transitions.cancel(job, ctx.clock.now(), reason)
    return ctx.store.update_job(job, events, durable=True)
