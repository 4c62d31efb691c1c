"""Hooks of a running attempt: following its output, reporting `started`, and watching for
the checkpoint sentinel once a preemption's stop began."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

import anyio

from jobd.api.progress import Sample
from jobd.wire import calls
from jobd.worker.checkpoints import checkpoint_dir
from jobd.worker.following import OutputFollower, SentinelWatch
from jobd.worker.gangs import master_port_said
from jobd.worker.hooks.base import Hook
from jobd.worker.jobrecord import AttemptPhase
from jobd.worker.progress import ProgressScanner, ProgressSender
from jobd.worker.shim.protocol import STDOUT_FILE, ExitStatus

if TYPE_CHECKING:
    from jobd.worker.execution import Execution

__all__ = ["FollowOutput", "ReportStarted", "WatchSentinel"]

# How long `started` waits to be told together with `complete`: a job that is over by
# then costs the broker one report, and its slot comes back a round trip sooner.
STARTED_REPORT_DELAY_S = 0.005
# How long a finished job's `complete` waits for its output to be shipped: logs usually
# arrive whole before the job is seen to end, but a slow broker or a full log disk never
# holds a finished job in Running longer than this (the rest follows after).
LOG_CATCH_UP_S = 2.0


class ReportStarted(Hook):
    """Tell the broker the workload runs, unless it is over within a few ms: then `started`
    goes with `complete` in one request instead (ReportCompletion). Reports keep their
    order, so `complete` never overtakes a `started` sent here."""

    def __init__(self) -> None:
        self.reported = anyio.Event()  # told, or left to go with `complete`
        self._now = anyio.Event()  # ends STARTED_REPORT_DELAY_S early

    async def poststart(self, ex: Execution) -> None:
        if ex.record.started_reported or ex.over:
            self.reported.set()
        else:
            ex.task_group().start_soon(self._report, ex)

    async def _report(self, ex: Execution) -> None:
        with anyio.move_on_after(STARTED_REPORT_DELAY_S):
            await self._now.wait()
        if not ex.over:
            ckpt = checkpoint_dir(ex.settings.checkpoint_root, ex.job_id)
            pinned = {"cpuset": ex.cpuset} if ex.cpuset else {}
            await ex.link.report(
                ex.job_id,
                "started",
                ex.attempt,
                checkpoint_dir=f"{ckpt}/",
                **pinned,
                **master_port_said(ex.record.rank, ex.job),
            )
            ex.record.started_reported = True
        self.reported.set()

    async def stop(self, ex: Execution, reason: str) -> None:
        self._now.set()  # the broker hears `started` before `stopping`
        await self.reported.wait()

    async def exited(self, ex: Execution, end: ExitStatus) -> None:
        self._now.set()


class FollowOutput(Hook):
    """Ship the output files to the broker's log, capped, and read progress lines from
    stdout on the way (read once for both)."""

    def __init__(self) -> None:
        self.follower: OutputFollower | None = None
        self._lines = ProgressScanner()
        self._progress: ProgressSender | None = None
        self._sending = False

    async def poststart(self, ex: Execution) -> None:
        self._progress = ProgressSender(ex.link, ex.job_id, ex.attempt)
        await _continue_output(ex)
        self.follower = OutputFollower(
            ex.link,
            ex.state_dir,
            ex.record,
            ex.save,
            ex.settings.max_log_bytes,
            on_stdout=partial(self._read_progress, ex),
            rank=ex.record.rank or 0,  # a gang's member appends to its own rank's log
        )
        ex.task_group().start_soon(self.follower.run)

    def _read_progress(self, ex: Execution, chunk: bytes) -> None:
        sample = self._lines.feed(chunk)
        if sample is None or self._progress is None:
            return
        if not self._sending:
            # Started by the first sample: most jobs report none, and pay for no task.
            self._sending = True
            ex.task_group().start_soon(self._progress.run)
        self._progress.offer(sample)

    def last_progress(self) -> Sample | None:
        """The newest progress line not yet sent; the sender stops."""
        return None if self._progress is None else self._progress.close()

    async def exited(self, ex: Execution, end: ExitStatus) -> None:
        if self.follower is None:
            return
        self.follower.finished.set()
        if not ex.record.complete_reported:
            with anyio.move_on_after(LOG_CATCH_UP_S):
                await self.follower.done.wait()


async def _continue_output(ex: Execution) -> None:
    """A retried job's new attempt writes after the output its earlier ones left.

    The broker keeps one output per job, written at the worker's offsets; a new attempt
    starts its own files at 0, so its first offset is where the broker's output ends now
    (an empty append answers that). Asked once, before anything is shipped.
    """
    job = ex.job
    if job is None or ex.record.log_offset or not getattr(job.status, "retries", 0):
        return
    end = await ex.link.call(calls.append_logs(ex.job_id, 0, b""))
    if end:
        ex.record.log_offset = end
        await ex.save()  # an agent that re-adopts the run goes on from there too


class WatchSentinel(Hook):
    """After a preemption's stop began, look for the sentinel in stdout written since (byte
    exact, across reads), and report `checkpoint-complete` once; `complete` waits for it."""

    def __init__(self) -> None:
        self._done: anyio.Event | None = None

    async def poststart(self, ex: Execution) -> None:
        if ex.record.stop_reason == "preempt" and not ex.record.checkpoint_reported:
            self._watch(ex)  # taken back mid-preemption

    async def stop(self, ex: Execution, reason: str) -> None:
        if reason == "preempt":
            self._watch(ex)

    async def exited(self, ex: Execution, end: ExitStatus) -> None:
        if self._done is not None and not ex.record.complete_reported:
            await self._done.wait()

    def _watch(self, ex: Execution) -> None:
        assert ex.record.sentinel_from is not None
        done = self._done = anyio.Event()
        watch = SentinelWatch(ex.state_dir / STDOUT_FILE, ex.record.sentinel_from)

        async def watch_and_report() -> None:
            try:
                await watch.run(ex.reached(AttemptPhase.EXITED))
                if watch.seen.is_set():
                    ex.link.event("checkpoint_sentinel_seen", ex.job_id)
                    await ex.link.report(ex.job_id, "checkpoint-complete", ex.attempt)
                    ex.record.checkpoint_reported = True
                    await ex.save()
            finally:
                done.set()

        ex.task_group().start_soon(watch_and_report)
