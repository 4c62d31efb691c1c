"""One job attempt on this host, from its launch (or adoption) to its reported end.

The workload runs under its shim (jobd.worker.shim), which outlives the agent; an
Execution is the agent's side of one attempt, new or re-adopted after a restart. Its life
is one phase (AttemptPhase, saved in its record: PREPARING, STARTING, RUNNING, STOPPING,
EXITED, REPORTED, DONE) and its steps are hooks run in order at each stage (prestart,
poststart, stop, exited, cleanup: jobd.worker.hooks), as Nomad's task runner does. The
seed's worker steps are those hooks: a stop asks the shim for SIGTERM, the job's grace,
then SIGKILL; the sentinel is looked for in stdout written after the stop began and
reported before `/complete`, from which the final phase flows.
"""

from __future__ import annotations

import errno
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import anyio.to_thread

from jobd.logconfig import get_logger
from jobd.worker.gangs import pick_master_port
from jobd.worker.hooks import Hook, LaunchPlan, StartFailed, default_hooks
from jobd.worker.hooks.ending import wire_completion
from jobd.worker.jobrecord import AttemptPhase, JobRecord, boot_id, job_dir
from jobd.worker.jobview import JobView
from jobd.worker.limits import NO_ENFORCEMENT, CoreAllocator, Enforcement
from jobd.worker.owners import OWNER_UNKNOWN, OwnerUnknown
from jobd.worker.removal import Removals
from jobd.worker.reporting import BrokerLink
from jobd.worker.settings import WorkerSettings, attempt_of, effective_grace
from jobd.worker.shim.client import (
    Shim,
    ShimPool,
    adopt,
    end_orphaned_job,
    read_record,
    start_shim,
)
from jobd.worker.shim.containment import Containment
from jobd.worker.shim.protocol import RECORD_FILE, SPEC_FILE, ExitStatus, LaunchSpec, as_grace
from jobd.worker.shim.statedir import read_json

__all__ = ["Execution", "Host"]

log = get_logger()

_DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


@dataclass
class Host:
    """What every attempt on this worker shares."""

    settings: WorkerSettings
    containment: Containment
    link: BrokerLink
    pool: ShimPool = field(default_factory=ShimPool)
    # How limits are enforced here, and the cores each running job holds (worker/limits.py).
    enforcement: Enforcement = field(default_factory=lambda: NO_ENFORCEMENT)
    cores: CoreAllocator = field(default_factory=lambda: CoreAllocator(()))
    # Over attempts' state directories, removed off the event loop (worker/removal.py).
    removals: Removals = field(default_factory=Removals)


class Execution:
    """One job attempt on this worker, launched here or re-adopted from an earlier agent."""

    def __init__(
        self,
        host: Host,
        record: JobRecord,
        state_dir: Path,
        grace_s: float,
        job: JobView | None = None,
        shim: Shim | None = None,
        hooks: Sequence[Hook] | None = None,
    ) -> None:
        self.host, self.settings, self.link = host, host.settings, host.link
        self.record, self.state_dir, self.grace_s = record, state_dir, grace_s
        if record.rank is not None:  # every report on a gang's member says its rank
            self.link.ranks[record.job_id] = record.rank
        self.job = job  # None when adopted: the broker's word comes with the next change
        self.shim = shim
        self.adopted = job is None
        self.hooks = list(default_hooks() if hooks is None else hooks)
        self.failed = False  # failed alone (start_failed, supervision_failed): never again
        self.filled_disk: str | None = None  # why it was ended for filling the disk
        self.cpuset: list[int] | None = None  # the cores it is pinned to (hooks/limits.py)
        self._stop_asked = record.stop_reason is not None
        self._hooked = anyio.Event()  # the poststart hooks ran (or it failed): a stop may act
        self._phase_events: dict[AttemptPhase, anyio.Event] = {}
        self._tg: anyio.abc.TaskGroup | None = None
        self._save_lock = anyio.Lock()
        self._unsaved = False  # the last save found the disk full (logged once)

    @classmethod
    def new(cls, job: JobView, host: Host, hooks: Sequence[Hook] | None = None) -> Execution:
        """The attempt the broker bound here, still to be launched (hooks: default_hooks())."""
        attempt = attempt_of(job)
        record = JobRecord(job.id, attempt, boot_id(), phase=AttemptPhase.PREPARING)
        member = job.member(host.settings.name) if job.status.members else None
        if member is not None:  # a gang's member: its rank; rank 0 chooses the port
            record.rank = member.rank
            if member.rank == 0 and job.status.master_port is None:
                job.status.master_port = pick_master_port(member.address)
        state_dir = job_dir(host.settings.state_dir / "jobs", job.id, attempt)
        grace_s = effective_grace(job, host.settings)
        return cls(host, record, state_dir, grace_s, job=job, hooks=hooks)

    @classmethod
    def readopted(
        cls, state_dir: Path, record: JobRecord, shim: Shim | None, host: Host
    ) -> Execution:
        """The attempt an earlier agent left in state_dir (shim None: it is gone without
        recording the end)."""
        grace_s = _recorded_grace(state_dir)
        grace_s = host.settings.default_grace_s if grace_s is None else grace_s
        stopping = None if shim is None else shim.stopping()
        if record.stop_reason is None and stopping is not None:  # the record was lost
            record.stop_reason, record.sentinel_from = stopping.reason, record.stdout_offset
            record.advance(AttemptPhase.STOPPING)
        return cls(host, record, state_dir, grace_s, shim=shim)

    @property
    def job_id(self) -> int:
        return self.record.job_id

    @property
    def attempt(self) -> int:
        return self.record.attempt

    @property
    def phase(self) -> AttemptPhase:
        return self.record.phase

    @property
    def over(self) -> bool:
        """The workload's end is known."""
        return self.phase.reached(AttemptPhase.EXITED)

    def advance(self, phase: AttemptPhase) -> None:
        """Move on to phase (never back); whoever waits for it, or an earlier one, wakes."""
        if self.record.advance(phase):
            for waited, event in self._phase_events.items():
                if phase.reached(waited):
                    event.set()

    def reached(self, phase: AttemptPhase) -> anyio.Event:
        """Set once the attempt has reached phase (or a later one)."""
        event = self._phase_events.get(phase)
        if event is None:
            event = self._phase_events[phase] = anyio.Event()
            if self.phase.reached(phase):
                event.set()
        return event

    def task_group(self) -> anyio.abc.TaskGroup:
        """Where hooks start the attempt's background tasks (from poststart on)."""
        assert self._tg is not None, "tasks start from poststart on"
        return self._tg

    async def save(self) -> None:
        # One save at a time (follower, stop, sentinel all save): in order, never racing
        # over the same temporary file.
        async with self._save_lock:
            try:
                await anyio.to_thread.run_sync(self.record.save, self.state_dir)
            except OSError as exc:
                if exc.errno not in _DISK_FULL:
                    raise
                # The record only lets a restarted agent resume: this job goes on without
                # it (the next save writes it whole), whoever filled the disk.
                if not self._unsaved:
                    log.warning("record_not_saved", job=self.job_id, error=str(exc))
                self._unsaved = True
            else:
                self._unsaved = False

    async def run(self) -> None:
        """Launch (or take back) the workload and follow it until its end is reported and
        its output shipped. Any error of one job's becomes that job's failure, nothing more:
        `start_failed` before its workload runs, `supervision_failed` after."""
        try:
            if not self.adopted:
                await self._start()
        except Exception as exc:
            await self._fail("start_failed", exc)
            return
        try:
            await self._supervise()
        except Exception as exc:  # never the agent's end: this job's alone
            log.exception("supervision_failed", job=self.job_id)
            if not self.record.complete_reported:
                await self._fail("supervision_failed", exc)

    async def _start(self) -> None:
        job = self.job
        assert job is not None
        plan = LaunchPlan(list(job.spec.command), job.spec.cwd or str(Path.home()))
        for hook in self.hooks:
            await hook.prestart(self, plan)
        self.advance(AttemptPhase.STARTING)
        if self.state_dir.exists():  # launched before: never a second copy
            self.shim = adopt(self.state_dir)
            if self.shim is None:
                raise StartFailed(f"{self.state_dir} holds a launch whose supervisor is gone")
            self.advance(AttemptPhase.RUNNING)
            return
        spec = LaunchSpec(
            plan.argv, plan.cwd, plan.env, self.grace_s, job.id, self.attempt, plan.limits
        )
        if plan.owner is not None:
            spec = spec.replace(owner=plan.owner.name)
        host = self.host
        self.shim = await start_shim(host.pool, host.containment, self.state_dir, spec)
        self.advance(AttemptPhase.RUNNING)
        where = str(self.state_dir)
        self.link.event("process_started", job.id, attempt=self.attempt, state_dir=where)
        if self.shim.identity is not None:
            # Kept in memory, written with the first thing worth writing (output shipped, a
            # stop): until then the shim's own supervisor.json says it all.
            self.record.supervisor_pid = self.shim.identity.pid
            self.record.supervisor_start_time = self.shim.identity.start_time
        if self.record.rank is not None:
            # A gang's member: its rank is nowhere else a restarted agent could read it
            # (a pooled launch writes no spec file), and its reports need it.
            await self.save()

    async def _supervise(self) -> None:
        async with anyio.create_task_group() as tg:
            self._tg = tg
            for hook in self.hooks:
                await hook.poststart(self)
            self._hooked.set()
            end = await self._wait()
            self.advance(AttemptPhase.EXITED)
            for hook in self.hooks:
                await hook.exited(self, end)
        for hook in self.hooks:
            await hook.cleanup(self)

    async def _wait(self) -> ExitStatus:
        if self.shim is None:
            return await self._end_orphan(ExitStatus.unrecorded())
        if self.record.complete_reported:
            return self.shim.status() or ExitStatus.unrecorded()
        end = await self.shim.wait()
        return await self._end_orphan(end) if end.lost else end

    async def _end_orphan(self, end: ExitStatus) -> ExitStatus:
        """Its shim died without a word: kill what it left and wait until that is gone,
        so that nothing of the job runs once its end is reported and its place given."""
        killed, left = await end_orphaned_job(self.state_dir, self.host.containment)
        if not killed:
            return end
        pids = [member.pid for member in killed]
        log.warning("orphan_killed", job=self.job_id, pids=pids, surviving=[m.pid for m in left])
        note = f"; {len(killed)} of its processes, left running, were killed"
        return end.replace(error=(end.error or "") + note)

    async def _fail(self, reason: str, exc: Exception) -> None:
        exc = _cause(exc)
        plain = isinstance(exc, StartFailed | OwnerUnknown)
        message = str(exc) if plain else f"{type(exc).__name__}: {exc}"
        self.failed = True
        self.advance(AttemptPhase.EXITED)
        self._hooked.set()
        self.link.event(reason, self.job_id, error=message)
        # The job's reason: an owner this host does not know is said as such.
        ended = OWNER_UNKNOWN if isinstance(exc, OwnerUnknown) else reason
        body: dict[str, Any] = {"exit_code": None, "signal": None, "reason": ended}
        body["message"] = message
        await self.link.report(self.job_id, "complete", self.attempt, **wire_completion(body))
        self.advance(AttemptPhase.REPORTED)

    async def end_for_full_disk(self, why: str) -> None:
        """SIGKILL a workload whose output filled the disk and goes on writing: it ends
        `OutputDiskFull` (why). No grace: nothing it would save has room, nor has a stop
        file; its supervisor sees it killed and ends the job as for any other end."""
        if self.filled_disk is not None or self.over:
            return
        self.filled_disk = why
        record = await anyio.to_thread.run_sync(read_record, self.state_dir)
        if record is not None and record.shim.is_running():
            log.error("job_filled_the_disk", job=self.job_id, error=why)
            await anyio.to_thread.run_sync(self.host.containment.kill_remains, record)

    async def stop(self, reason: str) -> None:
        """Run the stop hooks once (SIGTERM via the shim, the grace, SIGKILL; the sentinel;
        `stopping` reported), as soon as the workload runs; nothing once it is over."""
        if self._stop_asked or self.over:
            return
        self._stop_asked = True
        try:
            await self._hooked.wait()
            if self.shim is None or self.over:
                return  # over already (a job whose end the broker heard first)
            for hook in self.hooks:
                await hook.stop(self, reason)
        except Exception:  # a job's stop must never take the agent down
            log.exception("stop_failed", job=self.job_id, reason=reason)


def _cause(exc: Exception) -> Exception:
    """The one error inside a task group's, so the job's message names what went wrong
    ("OSError: [Errno 28] ...", not "unhandled errors in a TaskGroup")."""
    while isinstance(exc, ExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def _recorded_grace(state_dir: Path) -> float | None:
    """The grace in supervisor.json, else spec.json (a shim that never started its workload)."""
    data = read_json(state_dir / RECORD_FILE) or read_json(state_dir / SPEC_FILE) or {}
    return as_grace(data.get("grace_s"))
