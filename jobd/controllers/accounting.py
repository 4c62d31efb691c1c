"""Accounting: each run's usage is charged to its project and owner when the run ends.

The loop follows the jobs bound to workers; when one leaves them (it ended, was
preempted, lost, or went back to the queue), its run — from `started_at` to the change,
billed by `Settings.billing` — is charged to the store's `usage` table once per (job,
attempt), and to the usage held in memory for the scheduler (fairshare.py). A resync
reads the stored usage again (another broker may have charged runs). Next stage: the
scheduler's fair-share order, `job usage` and `/metrics` read the usage.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from jobd.api.models import BOUND_PHASES, Job
from jobd.controllers.context import Context
from jobd.controllers.fairshare import Usage, run_charge
from jobd.controllers.queueing import DONE, Result
from jobd.store.base import Change, UsageRecord

__all__ = ["RELOAD_KEY", "AccountingController", "Run"]

RELOAD_KEY = "reload"


@dataclass(frozen=True)
class Run:
    """One run of a job as it was when it was bound and started."""

    job: int
    attempt: int
    project: str
    owner: str
    started_at: datetime
    rate: float  # billed per second

    @property
    def key(self) -> str:
        return f"{self.job}.{self.attempt}"


class AccountingController:
    """Keys: a run that ended (`<job>.<attempt>`), and `reload`."""

    name = "accounting"

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.resync_s = ctx.settings.sweep_interval_s
        self._running: dict[int, Run] = {}
        self._ended: dict[str, tuple[Run, datetime]] = {}
        for job in ctx.view.bound.values():
            self._follow(job)

    def _follow(self, job: Job) -> None:
        started = job.status.started_at
        if started is None:
            return
        rate = self.ctx.settings.billing.rate(job.spec.resources, len(job.status.gpus))
        owner = job.metadata.owner or ""
        self._running[job.id] = Run(job.id, job.status.attempt, job.project, owner, started, rate)

    def keys_for(self, change: Change) -> Iterable[str]:
        if change.kind != "Job":
            return []
        job = change.job
        if change.op != "DELETED" and job is not None and job.status.phase in BOUND_PHASES:
            if job.id not in self._running:
                self._follow(job)
            return []
        run = self._running.pop(int(change.key), None)
        if run is None:
            return []
        ended = job.status.finished_at if job is not None else None
        self._ended[run.key] = (run, ended or self.ctx.clock.now())
        return [run.key]

    def keys_all(self) -> Iterable[str]:
        return [RELOAD_KEY]

    async def reconcile(self, key: str) -> Result:
        if key == RELOAD_KEY:
            records = await self.ctx.runner.run(self.ctx.store.list_usage)
            fresh = Usage.load(records)
            self.ctx.usage.projects, self.ctx.usage.users = fresh.projects, fresh.users
            return DONE
        ended = self._ended.pop(key, None)
        if ended is None:
            return DONE
        run, at = ended
        half = self.ctx.settings.billing.half_life_s
        charge = run_charge(run.rate, (at - run.started_at).total_seconds(), 0.0, half)
        at_s = at.timestamp()
        charges = [UsageRecord(run.project, "", charge, at_s)]
        if run.owner:  # a job of no known owner counts for its project alone
            charges.append(UsageRecord(run.project, run.owner, charge, at_s))
        try:
            charged = await self.ctx.runner.run(
                self.ctx.store.charge_usage, run.job, run.attempt, charges, half
            )
        except Exception:
            self._ended.setdefault(key, ended)  # tried again, with backoff
            raise
        if charged:
            self.ctx.usage.charge(run.project, run.owner, charge, at_s, half)
        return DONE
