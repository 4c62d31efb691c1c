"""Accounting: each run's usage is charged to its project and owner when the run ends.

The loop follows the jobs bound to workers; when one leaves them (it ended, was
preempted, lost, or went back to the queue), its run — from `started_at` to its end,
billed by `Settings.billing` — is charged at once to the usage held in memory for the
scheduler (fairshare.py), and to the store's `usage` table within `coalesce_s` (2 s): the
runs that ended meanwhile in one transaction, each once per (job, attempt). A resync
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
from jobd.store.base import Change, RunCharge

__all__ = ["CHARGE_KEY", "RELOAD_KEY", "AccountingController", "Run"]

CHARGE_KEY = "charge"
RELOAD_KEY = "reload"


@dataclass(frozen=True)
class Run:
    """One run of a job as it was when it started."""

    job: int
    attempt: int
    project: str
    owner: str
    started_at: datetime
    rate: float  # billed per second


class AccountingController:
    """Keys: `charge` (write the runs that ended), `reload` (read the stored usage)."""

    name = "accounting"
    coalesce_s = 2.0  # the runs that end within this make one write

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.resync_s = ctx.settings.sweep_interval_s
        self._running: dict[int, Run] = {}
        self._unwritten: list[RunCharge] = []
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
        self._ended(run, ended or self.ctx.clock.now())
        return [CHARGE_KEY]

    def _ended(self, run: Run, at: datetime) -> None:
        """Charge the run in memory now (the scheduler's next pass counts it), and keep
        it for the store's next write."""
        half = self.ctx.settings.billing.half_life_s
        value = run_charge(run.rate, (at - run.started_at).total_seconds(), 0.0, half)
        charge = RunCharge(run.job, run.attempt, run.project, run.owner, value, at.timestamp())
        self._unwritten.append(charge)
        self.ctx.usage.charge(run.project, run.owner, value, charge.at, half)

    def keys_all(self) -> Iterable[str]:
        return [RELOAD_KEY]

    async def reconcile(self, key: str) -> Result:
        half = self.ctx.settings.billing.half_life_s
        if key == RELOAD_KEY:
            fresh = Usage.load(await self.ctx.runner.run(self.ctx.store.list_usage))
            for run in self._unwritten:  # not in the store yet: kept
                fresh.charge(run.project, run.user, run.value, run.at, half)
            self.ctx.usage.projects, self.ctx.usage.users = fresh.projects, fresh.users
            return DONE
        runs, self._unwritten = self._unwritten, []
        try:
            await self.ctx.runner.run(self.ctx.store.charge_usage, runs, half)
        except Exception:
            self._unwritten[:0] = runs  # written with the next, after the backoff
            raise
        return DONE
