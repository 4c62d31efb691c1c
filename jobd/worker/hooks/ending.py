"""Hooks of an attempt's end: the stop (SIGTERM via the shim, the grace, then SIGKILL,
carried out by the shim even if the agent dies meanwhile), the `complete` report, from
which the final phase flows, and the state directory's removal."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio.to_thread

from jobd.worker.checkpoints import checkpoint_dir, find_resume_target
from jobd.worker.diskspace import filled_the_disk
from jobd.worker.gangs import master_port_said
from jobd.worker.hooks.base import Hook
from jobd.worker.hooks.running import FollowOutput
from jobd.worker.jobrecord import AttemptPhase, boot_id, made_this_boot
from jobd.worker.shim.protocol import ExitStatus

if TYPE_CHECKING:
    from jobd.worker.execution import Execution

__all__ = ["ReportCompletion", "ReportStopping", "RequestStop", "Tidy", "wire_completion"]


class RequestStop(Hook):
    """Ask the shim for SIGTERM, the job's grace, then SIGKILL."""

    async def stop(self, ex: Execution, reason: str) -> None:
        assert ex.shim is not None
        record = ex.record
        record.stop_reason, record.sentinel_from = reason, _size(ex.shim.stdout_path)
        ex.advance(AttemptPhase.STOPPING)
        await ex.save()  # before the request: a restarted agent scans from the same byte
        await anyio.to_thread.run_sync(ex.shim.request_stop, ex.grace_s, reason)
        ex.link.event(
            "signal_sent",
            ex.job_id,
            signal="SIGTERM",
            signal_number=int(signal.SIGTERM),
            reason=reason,
            grace_s=float(ex.grace_s),
        )


class ReportStopping(Hook):
    async def stop(self, ex: Execution, reason: str) -> None:
        await ex.link.report(ex.job_id, "stopping", ex.attempt)


class ReportCompletion(Hook):
    """Report `complete` (with `started` and the last progress line if they are due)."""

    def __init__(self, output: FollowOutput) -> None:
        self.output = output

    async def exited(self, ex: Execution, end: ExitStatus) -> None:
        if not ex.record.complete_reported:
            await self._report(ex, end)
        self.output.last_progress()

    async def _report(self, ex: Execution, end: ExitStatus) -> None:
        if end.stop is not None and end.stop.sigkill_at is not None:
            ex.link.event(
                "signal_sent",
                ex.job_id,
                signal="SIGKILL",
                signal_number=int(signal.SIGKILL),
                reason="grace_expired",
            )
        ckpt = checkpoint_dir(ex.settings.checkpoint_root, ex.job_id)
        latest = find_resume_target(ckpt)  # ckpt itself when it holds none (or is gone)
        body: dict[str, Any] = {
            "exit_code": end.exit_code,
            "signal": end.signal,
            "checkpoint_latest": str(latest) if latest != ckpt else str(ckpt) + "/",
            **_failure(ex, end),
        }
        reports = [("complete", wire_completion(body))]
        last_progress = self.output.last_progress()
        if last_progress is not None:  # the newest line before the end, not yet sent
            reports.insert(0, ("progress", last_progress))
        if not ex.record.started_reported and end.started_at is not None:
            started: dict[str, Any] = {
                "checkpoint_dir": f"{ckpt}/",
                **master_port_said(ex.record.rank, ex.job),
            }
            if ex.cpuset:
                started["cpuset"] = ex.cpuset
            reports.insert(0, ("started", started))
        # Queued first, so it rides with `complete` (the broker records it after the
        # report, in the same commit) rather than in a request of its own.
        ex.link.event(
            "process_exited",
            ex.job_id,
            exit_code=end.exit_code,
            signal=end.signal_name,  # a name, as in signal_sent (CONTRACT.md §7)
            signal_number=end.signal,
        )
        await ex.link.report_many(ex.job_id, reports, ex.attempt)
        ex.advance(AttemptPhase.REPORTED)
        if ex.settings.keep_job_files or ex.record.log_offset:
            await ex.save()  # else nothing to resume: a re-report would change nothing


def _failure(ex: Execution, end: ExitStatus) -> dict[str, str]:
    """A reason of jobd's own where the exit code cannot say what happened."""
    # A stop (preemption, cancel) ends as the stop says, a full disk or not.
    filled = ex.filled_disk or (filled_the_disk(ex.state_dir) if end.stop is None else None)
    if filled is not None:  # whatever it then exited with, or its shim could not write
        return {"reason": "OutputDiskFull", "message": filled}
    if end.memory_exceeded and end.stop is None and end.exit_code != 0:
        # (One that exited 0 all the same, an OOM-killed child handled, succeeded.)
        return {"reason": "MemoryLimitExceeded", "message": end.memory_exceeded}
    if end.lost:
        recorded = ex.record.boot_id
        same_boot = recorded == boot_id() if recorded else made_this_boot(ex.state_dir)
        reason = "supervisor_lost" if same_boot else "host_restarted"
        return {"reason": reason, "message": end.error or ""}
    if end.error and end.started_at is None and end.stop is None:
        # (Stopped before its workload started: it ends as the stop says, never run.)
        return {"reason": "start_failed", "message": end.error}
    return {}


# The fields of a `complete` (wire.models.Completion) and the longest text each may hold:
# the broker refuses a batch holding a longer one whole.
_COMPLETION_FIELDS = {
    "exit_code": None,
    "signal": None,
    "checkpoint_latest": None,
    "reason": 64,
    "message": 4096,
}


def wire_completion(body: dict[str, Any]) -> dict[str, Any]:
    """The fields of a `complete` the wire knows (reason and message since issue 11), a
    text cut to what the wire holds."""
    return {k: _cut(v, _COMPLETION_FIELDS[k]) for k, v in body.items() if k in _COMPLETION_FIELDS}


def _cut(value: Any, longest: int | None) -> Any:
    if longest is None or not isinstance(value, str) or len(value) <= longest:
        return value
    return value[: longest - 1] + "…"


class Tidy(Hook):
    """The job is over and reported, its output shipped: the local copy goes (or, kept by
    --keep-job-files, its record says it is done)."""

    async def cleanup(self, ex: Execution) -> None:
        ex.advance(AttemptPhase.DONE)
        if ex.settings.keep_job_files:
            await ex.save()
        else:
            ex.host.removals.remove(ex.state_dir)  # on its own thread (worker/removal.py)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0
