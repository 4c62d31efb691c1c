"""The queue as fair share and quotas read it: one scheduling pass when they matter.

The scheduler (scheduler.py) walks the queue in (priority, id) order off one index when
a single project has queued jobs and no project sets a limit. Otherwise it hands its
pass to `FairPass`: each queued project's head is read off its own index
(`queue_head(project=...)`) and the heads are merged highest priority first, then
highest fair-share factor (fairshare.py), then first come. Priority stays the seed's:
a factor orders jobs within one priority only.

Quotas (quotas.py) are checked before a job is bound. A job past its owner's running
limit, or its project's quota when the project does not borrow, waits with
`Scheduled=False, reason=QuotaExceeded`. A job past a quota its project may borrow
beyond is bound only after every job within its quota had its turn, on the idle
capacity left; reclaim (reclaim.py) takes that capacity back when a project within its
quota waits for it. Next stage: the worker sees the binding, as for any pass.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from jobd.api.models import Job, Project
from jobd.controllers import transitions
from jobd.controllers.capacity import Capacity, Seat, choose_seat
from jobd.controllers.context import Context
from jobd.controllers.fairshare import factors, shares_of
from jobd.controllers.quotas import Held, QuotaVerdict, held_by, limits_anything, quota_verdict
from jobd.store.base import Conflict, EventRecord, Fits, QueueHead

__all__ = ["FairBasis", "FairInputs", "FairPass", "fair_basis", "fair_inputs", "project_factors"]


@dataclass
class FairInputs:
    """What a fair pass needs of the view, taken on the event loop (the pass itself
    runs on the store's thread, which never reads the view: store/runner.py)."""

    projects: dict[str, Project]
    names: list[str]  # the projects with ready queued jobs
    factor: dict[str, float]
    limits: bool
    held: dict[str, Held]
    users: dict[tuple[str, str], int]


def fair_inputs(ctx: Context) -> FairInputs | None:
    """The inputs of a fair pass; None when ordering and limits are plain (priority,
    id): one project at most has ready queued jobs, and no project sets a limit."""
    view = ctx.view
    names = list(view.queued_projects)
    if len(names) <= 1 and not limits_anything(view.projects.values()):
        return None
    return fair_basis(ctx, usage=len(names) > 1).inputs(names)


@dataclass
class FairBasis:
    """What fair share and quotas read of the view, taken on the event loop, before the
    projects in play are known (a create's, once its documents are read off the loop):
    `inputs` then orders any set of them as a pass would."""

    projects: dict[str, Project]
    limits: bool
    held: dict[str, Held]
    users: dict[tuple[str, str], int]
    usage: dict[str, float]  # each project's, running jobs' so far included

    def inputs(self, names: list[str]) -> FairInputs | None:
        """A fair pass's inputs over the projects `names`; None as fair_inputs says."""
        if len(names) <= 1 and not self.limits:
            return None
        shares = shares_of(self.projects)
        factor = factors(self.usage, shares, names) if len(names) > 1 else {}
        return FairInputs(self.projects, names, factor, self.limits, self.held, self.users)


def fair_basis(ctx: Context, usage: bool = True) -> FairBasis:
    """The view's part of a fair pass (copies); `usage` False when one project at most
    is in play (no factor to work out)."""
    view = ctx.view
    limits = limits_anything(view.projects.values())
    held, users = held_by(view.bound.values()) if limits else ({}, {})
    by_project = _usage(ctx) if usage else {}
    return FairBasis(dict(view.projects), limits, held, users, by_project)


def _usage(ctx: Context) -> dict[str, float]:
    billing = ctx.settings.billing
    return ctx.usage.effective(ctx.view.bound.values(), billing, ctx.clock.now())[0]


def project_factors(ctx: Context, names: Iterable[str]) -> dict[str, float]:
    """The fair-share factor of each of `names` now (usage so far of running jobs counted)."""
    return factors(_usage(ctx), shares_of(ctx.view.projects), names)


@dataclass
class _Head:
    """One project's queued jobs read so far, and where its next page starts."""

    jobs: list[Job] = field(default_factory=list)
    after: tuple[int, int] | None = None
    more: bool = True


class FairPass:
    """One pass of binds in fair-share order under the projects' quotas."""

    def __init__(
        self,
        ctx: Context,
        inputs: FairInputs,
        caps: dict[str, Capacity],
        fits: Fits,
        page: int,
        bind: Callable[[Job, Seat], bool],
        admit: Callable[[Job], bool],
        choose: Callable[[Job], Seat | None] | None = None,
        queue: QueueHead | None = None,
    ) -> None:
        self.ctx, self.caps, self.fits, self.page = ctx, caps, fits, page
        # Where queued jobs are read: the store's index, or a create's new jobs.
        self.queue_head = queue or ctx.store.queue_head
        self.bind, self.admit = bind, admit
        # Where a job goes: choose_seat's answer (the scheduler passes its room index's).
        self.choose = choose or (lambda job: choose_seat(job, caps))
        self.projects, self.limits = inputs.projects, inputs.limits
        self.held, self.users, self.factor = inputs.held, inputs.users, inputs.factor
        self.heads = {name: _Head() for name in inputs.names}
        self.heap: list[tuple[int, float, int, Job]] = []
        self.raced = False

    def run(self, scan_limit: int, room: Callable[[], int]) -> bool:
        """Bind what fits, best first; True when a bind lost a race."""
        for name in self.heads:
            self._push_next(name)
        borrowers: list[tuple[Job, QuotaVerdict]] = []
        scanned, free = 0, room()  # room is counted again only when a bind took some
        while self.heap and scanned < scan_limit and free > 0:
            job = heapq.heappop(self.heap)[3]
            scanned += 1
            self._push_next(job.project)
            if not self.admit(job):
                continue
            verdict = self._verdict(job)
            if verdict is None:
                if self._place(job):
                    free = room()
            elif verdict.borrowable:
                borrowers.append((job, verdict))
            else:
                self._say(job, verdict)
        # Idle capacity left once every job within its quota had its turn: borrowed.
        for job, verdict in borrowers:
            if free <= 0 or not self._place(job, clear=False):
                self._say(job, verdict)
            else:
                free = room()
        return self.raced

    def _verdict(self, job: Job) -> QuotaVerdict | None:
        if not self.limits:
            return None
        project = self.projects.get(job.project)
        user = self.users.get((job.project, job.metadata.owner or ""), 0)
        return quota_verdict(job, project, self.held.get(job.project), user)

    def _place(self, job: Job, clear: bool = True) -> bool:
        """Bind `job` where it fits; True when it was bound."""
        cap = self.choose(job)
        if cap is None:
            if clear:  # within its quota now, waiting for room: it says so
                self._write(job, *transitions.within_quota(job, self.ctx.clock.now()))
            return False
        if not self.bind(job, cap):
            self.raced = True
            return False
        self.held.setdefault(job.project, Held()).add(job)
        key = (job.project, job.metadata.owner or "")
        self.users[key] = self.users.get(key, 0) + 1
        return True

    def _say(self, job: Job, verdict: QuotaVerdict) -> None:
        now = self.ctx.clock.now()
        self._write(job, *transitions.quota_exceeded(job, verdict.message, now))

    def _write(self, job: Job, new: Job, events: list[EventRecord]) -> None:
        if new is job:  # nothing to say that it does not say already
            return
        try:
            self.ctx.store.update_job(new, events)
        except Conflict:
            self.raced = True

    def _push_next(self, name: str) -> None:
        """Push `name`'s next queued job onto the merge, reading a page when needed."""
        head = self.heads[name]
        if not head.jobs and head.more:
            page = self.queue_head(self.page, self.fits, head.after, project=name)
            head.more = len(page) == self.page
            head.jobs = page[::-1]  # popped from the end
            if page:
                head.after = (page[-1].status.effective.priority, page[-1].id)
        if head.jobs:
            job = head.jobs.pop()
            rank = -self.factor.get(name, 1.0)
            heapq.heappush(self.heap, (-job.status.effective.priority, rank, job.id, job))
