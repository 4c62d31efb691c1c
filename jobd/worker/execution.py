"""One job attempt on this host: its environment, its supervisor, its output, its stop, its end.

The workload runs under its supervisor (jobd.worker.supervisor), which outlives the agent;
an Execution is the agent's side of one attempt, new or re-adopted after a restart. The
seed's worker steps live here: a stop asks the supervisor for SIGTERM, the job's grace,
then SIGKILL (carried out even if the agent dies meanwhile); the sentinel is looked for in
stdout written after the stop began (byte-exact, across reads) and reported once
acknowledged and before `/complete`, from which the final phase flows. Completion is
reported apart from log shipping, which catches up after it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import anyio.to_thread

from jobd.api.models import Job
from jobd.api.vocabulary import ARRAY_INDEX
from jobd.logconfig import get_logger
from jobd.wire.models import Completion
from jobd.worker.checkpoints import checkpoint_dir, ensure_checkpoint_dir, find_resume_target
from jobd.worker.following import OutputFollower, SentinelWatch
from jobd.worker.jobrecord import JobRecord, boot_id, job_dir, made_this_boot
from jobd.worker.launching import (
    StartFailed,
    check_launchable,
    check_unmasked,
    start_supervised,
)
from jobd.worker.progress import ProgressScanner, ProgressSender
from jobd.worker.reporting import BrokerLink
from jobd.worker.runner import Runner
from jobd.worker.supervision import (
    ExitRecord,
    Launcher,
    SupervisedJob,
    SupervisedSpec,
    adopt,
    kill_orphaned_workload,
)
from jobd.worker.supervisor import RECORD_FILE, SPEC_FILE, read_json

__all__ = [
    "Execution",
    "WorkerSettings",
    "attempt_of",
    "effective_grace",
    "workload_env",
]

# Never inherited by a workload: the token, the store URL (it may hold a password) and
# every other setting of jobd's own; the workload's JOBD_* variables are set below.
_PRIVATE_PREFIX = "JOBD_"
# How long `started` waits to be told together with `complete`: a job that is over by
# then costs the broker one report, and its slot comes back a round trip sooner.
STARTED_REPORT_DELAY_S = 0.005
# How long a finished job's `complete` waits for its output to be shipped: logs usually
# arrive whole before the job is seen to end, but a slow broker or a full log disk never
# holds a finished job in Running longer than this (the rest follows after).
LOG_CATCH_UP_S = 2.0
DEFAULT_MAX_LOG_BYTES = 1 << 30
log = get_logger()


@dataclass
class WorkerSettings:
    name: str
    slots: int
    gpus: list[int]
    checkpoint_root: Path
    default_grace_s: float
    state_dir: Path  # the worker's own state: a directory per job attempt under jobs/
    checkpoint_ttl_days: float | None = None  # None: keep every checkpoint directory
    max_log_bytes: int = DEFAULT_MAX_LOG_BYTES  # per output file: head and newest bytes kept
    keep_job_files: bool = False  # keep a job's state directory once it is over and shipped
    gpu_memory: dict[int, int] = field(default_factory=dict)  # GPU index -> bytes, where known
    base_env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))


def attempt_of(job: Job) -> int:
    """The run's fencing number (status.attempt), 0 where the broker says none."""
    return int(getattr(job.status, "attempt", 0) or 0)


def workload_env(job: Job, settings: WorkerSettings, ckpt_dir: Path) -> dict[str, str]:
    """The workload's complete environment (CONTRACT.md §6)."""
    env = {k: v for k, v in settings.base_env.items() if not k.startswith(_PRIVATE_PREFIX)}
    env.pop("RESUME_FROM", None)  # only when set by the submitter or by `job resume`
    env.update(job.spec.env)
    env.update(
        {
            "JOBD_JOB_ID": str(job.id),
            "JOBD_JOB_NAME": job.metadata.name or "",
            "JOBD_PROJECT": job.project,
            "JOBD_CHECKPOINT_GRACE_S": _fmt(effective_grace(job, settings)),
            "JOBD_CHECKPOINT_DIR": str(ckpt_dir) + "/",
            # Exactly the GPUs assigned, whatever the worker inherited or the job asked
            # for: set and empty hides every GPU from a job that asked for none.
            "CUDA_VISIBLE_DEVICES": ",".join(str(g) for g in job.status.gpus),
        }
    )
    if job.metadata.array is not None:  # a member of an array or sweep (api/arrays.py)
        env[ARRAY_INDEX] = str(job.metadata.array.index)
    elif ARRAY_INDEX not in job.spec.env:  # the spec's, as a resumed member's holds it
        env.pop(ARRAY_INDEX, None)  # never the worker's own
    return env


def effective_grace(job: Job, settings: WorkerSettings) -> float:
    """Job spec > project default (both resolved by the broker) > this worker's default."""
    grace = job.status.effective.checkpoint_grace_s
    return settings.default_grace_s if grace is None else grace


def _fmt(seconds: float) -> str:
    return str(int(seconds)) if float(seconds).is_integer() else str(seconds)


class Execution:
    """One job attempt on this worker, launched here or re-adopted from an earlier agent."""

    def __init__(
        self,
        job: Job,
        settings: WorkerSettings,
        runner: Runner,
        link: BrokerLink,
        launcher: Launcher | None = None,
    ) -> None:
        record = JobRecord(job.id, attempt_of(job), boot_id())
        state_dir = job_dir(settings.state_dir / "jobs", job.id, record.attempt)
        self._setup(record, state_dir, effective_grace(job, settings), settings, runner, link)
        self.job: Job | None = job
        self.launcher = launcher or Launcher()

    def _setup(
        self,
        record: JobRecord,
        state_dir: Path,
        grace_s: float,
        settings: WorkerSettings,
        runner: Runner,
        link: BrokerLink,
    ) -> None:
        self.settings, self.runner, self.link = settings, runner, link
        self.record, self.state_dir, self.grace_s = record, state_dir, grace_s
        self.job = None
        self.launcher = Launcher()
        self.supervised: SupervisedJob | None = None
        self.adopted = False
        self.over = record.complete_reported  # the workload's end is known
        self.stop_sent = record.stop_reason is not None
        self.failed = False  # failed alone (start_failed, supervision_failed): never again
        self.launched = anyio.Event()  # launched (or failed to) and supervised
        self.finished = anyio.Event()
        self._started_reported = anyio.Event()  # told, or left to go with `complete`
        self._report_started_now = anyio.Event()  # ends STARTED_REPORT_DELAY_S early
        self._sentinel_done: anyio.Event | None = None
        self._progress_lines = ProgressScanner()
        self._progress = ProgressSender(link, record.job_id, record.attempt)
        self._progress_sending = False
        self._tg: anyio.abc.TaskGroup | None = None
        self._save_lock = anyio.Lock()

    @classmethod
    def adopting(
        cls,
        state_dir: Path,
        record: JobRecord,
        supervised: SupervisedJob | None,
        settings: WorkerSettings,
        runner: Runner,
        link: BrokerLink,
    ) -> Execution:
        """The attempt an earlier agent left in state_dir (supervised None: its supervisor
        is gone without recording the end)."""
        grace = _launch_record(state_dir).get("grace_s")
        grace_s = float(grace) if isinstance(grace, int | float) else settings.default_grace_s
        self = cls.__new__(cls)
        self._setup(record, state_dir, grace_s, settings, runner, link)
        self.supervised, self.adopted = supervised, True
        stopping = None if supervised is None else supervised.stopping()
        if record.stop_reason is None and stopping is not None:  # the record was lost
            record.stop_reason, record.sentinel_from = stopping.reason, record.stdout_offset
            self.stop_sent = True
        return self

    @property
    def job_id(self) -> int:
        return self.record.job_id

    @property
    def attempt(self) -> int:
        return self.record.attempt

    async def save(self) -> None:
        # One save at a time (follower, stop, sentinel all save): in order, never racing
        # over the same temporary file.
        async with self._save_lock:
            await anyio.to_thread.run_sync(self.record.save, self.state_dir)

    async def run(self) -> None:
        """Launch (or take back) the workload and follow it until its end is reported and
        its output shipped. Any error of one job's becomes that job's failure, nothing more:
        `start_failed` before its workload runs, `supervision_failed` after."""
        try:
            if not self.adopted:
                await self._launch()
        except Exception as exc:
            self.launched.set()
            await self._fail("start_failed", exc)
            return
        try:
            await self._supervise()
        except Exception as exc:  # never the agent's end: this job's alone
            log.exception("supervision_failed", job=self.job_id)
            if not self.record.complete_reported:
                await self._fail("supervision_failed", exc)

    async def _launch(self) -> None:
        job = self.job
        assert job is not None
        argv, cwd = list(job.spec.command), job.spec.cwd or str(Path.home())
        check_launchable(argv, cwd, job.spec.env)
        check_unmasked(job)
        ckpt = ensure_checkpoint_dir(self.settings.checkpoint_root, job.id)
        env = workload_env(job, self.settings, ckpt)
        spec = SupervisedSpec(argv, cwd, env, self.grace_s, job.id, self.attempt)
        if self.state_dir.exists():  # launched before: never a second copy
            self.supervised = adopt(self.state_dir)
            if self.supervised is None:
                raise StartFailed(f"{self.state_dir} holds a launch whose supervisor is gone")
            return
        self.supervised = await start_supervised(self.launcher, self.runner, self.state_dir, spec)
        where = str(self.state_dir)
        self.link.event("process_started", job.id, attempt=self.attempt, state_dir=where)
        supervisor = self.supervised.supervisor
        if supervisor is not None:
            # Kept in memory, written with the first thing worth writing (output shipped, a
            # stop): until then the supervisor's own supervisor.json says it all.
            self.record.supervisor_pid = supervisor.pid
            self.record.supervisor_start_time = supervisor.start_time

    async def _fail(self, reason: str, exc: Exception) -> None:
        message = str(exc) if isinstance(exc, StartFailed) else f"{type(exc).__name__}: {exc}"
        self.over = True
        self.failed = True
        self.finished.set()
        self.link.event(reason, self.job_id, error=message)
        body = {"exit_code": None, "signal": None, "reason": reason, "message": message}
        await self.link.report(self.job_id, "complete", self.attempt, **_wire(body))
        self.record.complete_reported = True

    async def _supervise(self) -> None:
        follower = OutputFollower(
            self.link,
            self.state_dir,
            self.record,
            self.save,
            self.settings.max_log_bytes,
            on_stdout=self._read_progress,
        )
        async with anyio.create_task_group() as tg:
            self._tg = tg
            tg.start_soon(follower.run)
            self.launched.set()
            if self.record.stop_reason == "preempt" and not self.record.checkpoint_reported:
                self._watch_sentinel()
            if self.record.started_reported or self.over:
                self._started_reported.set()
            else:
                tg.start_soon(self._report_started)
            ended = await self._wait()
            self.over = True
            self._report_started_now.set()
            self.finished.set()
            follower.finished.set()
            if not self.record.complete_reported:
                with anyio.move_on_after(LOG_CATCH_UP_S):
                    await follower.done.wait()
                await self._report_end(ended)
            self._progress.close()
        self.record.drained = True
        await self._tidy()

    def _read_progress(self, chunk: bytes) -> None:
        sample = self._progress_lines.feed(chunk)
        if sample is None:
            return
        if not self._progress_sending and self._tg is not None:
            # Started by the first sample: most jobs report none, and pay for no task.
            self._progress_sending = True
            self._tg.start_soon(self._progress.run)
        self._progress.offer(sample)

    async def _wait(self) -> ExitRecord:
        if self.supervised is None:
            await anyio.to_thread.run_sync(kill_orphaned_workload, self.state_dir)
            return ExitRecord.unrecorded()
        if self.record.complete_reported:
            return self.supervised.status() or ExitRecord.unrecorded()
        return await self.supervised.wait()

    async def _report_end(self, ended: ExitRecord) -> None:
        if self._sentinel_done is not None:
            await self._sentinel_done.wait()
        if ended.stop is not None and ended.stop.sigkill_at is not None:
            self.link.event(
                "signal_sent",
                self.job_id,
                signal="SIGKILL",
                signal_number=int(signal.SIGKILL),
                reason="grace_expired",
            )
        ckpt = checkpoint_dir(self.settings.checkpoint_root, self.job_id)
        latest = find_resume_target(ckpt) if ckpt.is_dir() else ckpt
        body: dict[str, Any] = {
            "exit_code": ended.exit_code,
            "signal": ended.signal,
            "checkpoint_latest": str(latest) if latest != ckpt else str(ckpt) + "/",
            **self._failure(ended),
        }
        reports = [("complete", _wire(body))]
        last_progress = self._progress.close()
        if last_progress is not None:  # the newest line before the end, not yet sent
            reports.insert(0, ("progress", last_progress))
        if not self.record.started_reported and ended.started_at is not None:
            reports.insert(0, ("started", {"checkpoint_dir": f"{ckpt}/"}))
        await self.link.report_many(self.job_id, reports, self.attempt)
        self.record.complete_reported = True
        if self.settings.keep_job_files or self.record.log_offset:
            await self.save()  # else nothing to resume: a re-report would change nothing
        self.link.event(
            "process_exited",
            self.job_id,
            exit_code=ended.exit_code,
            signal=ended.signal_name,  # a name, as in signal_sent (CONTRACT.md §7)
            signal_number=ended.signal,
        )

    def _failure(self, ended: ExitRecord) -> dict[str, str]:
        """A reason of jobd's own where the exit code cannot say what happened."""
        if ended.lost:
            recorded = self.record.boot_id
            same_boot = recorded == boot_id() if recorded else made_this_boot(self.state_dir)
            reason = "supervisor_lost" if same_boot else "host_restarted"
            return {"reason": reason, "message": ended.error or ""}
        if ended.error and ended.started_at is None and ended.stop is None:
            # (Stopped before its workload started: it ends as the stop says, never run.)
            return {"reason": "start_failed", "message": ended.error}
        return {}

    async def _tidy(self) -> None:
        """The job is over and reported, its output shipped: the local copy goes."""
        if self.settings.keep_job_files:
            await self.save()
        else:
            _remove_flat_dir(self.state_dir)

    async def _report_started(self) -> None:
        """Tell the broker the workload runs, unless it is over within a few ms.

        Then `started` goes with `complete` in one request instead (see _report_end).
        Reports keep their order, so `complete` never overtakes a `started` sent here.
        """
        with anyio.move_on_after(STARTED_REPORT_DELAY_S):
            await self._report_started_now.wait()
        if not self.over:
            ckpt = checkpoint_dir(self.settings.checkpoint_root, self.job_id)
            await self.link.report(self.job_id, "started", self.attempt, checkpoint_dir=f"{ckpt}/")
            self.record.started_reported = True
        self._started_reported.set()

    async def stop(self, reason: str) -> None:
        """Ask the supervisor for SIGTERM, the job's grace, then SIGKILL; report `stopping`."""
        if self.stop_sent or self.over:
            return
        self.stop_sent = True
        try:
            await self._stop(reason)
        except Exception:  # a job's stop must never take the agent down
            log.exception("stop_failed", job=self.job_id, reason=reason)

    async def _stop(self, reason: str) -> None:
        await self.launched.wait()
        if self.supervised is None or self.over:
            return  # over already (a job whose end the broker heard first): nothing to stop
        self._report_started_now.set()  # the broker hears `started` before `stopping`
        await self._started_reported.wait()
        record = self.record
        record.stop_reason, record.sentinel_from = reason, _size(self.supervised.stdout_path)
        await self.save()  # before the request: a restarted agent scans from the same byte
        await anyio.to_thread.run_sync(self.supervised.request_stop, self.grace_s, reason)
        self.link.event(
            "signal_sent",
            self.job_id,
            signal="SIGTERM",
            signal_number=int(signal.SIGTERM),
            reason=reason,
            grace_s=float(self.grace_s),
        )
        if reason == "preempt":
            self._watch_sentinel()
        await self.link.report(self.job_id, "stopping", self.attempt)

    def _watch_sentinel(self) -> None:
        assert self._tg is not None and self.record.sentinel_from is not None
        done = self._sentinel_done = anyio.Event()
        path = self.state_dir / "stdout"
        watch = SentinelWatch(path, self.record.sentinel_from)

        async def watch_and_report() -> None:
            try:
                await watch.run(self.finished)
                if watch.seen.is_set():
                    self.link.event("checkpoint_sentinel_seen", self.job_id)
                    await self.link.report(self.job_id, "checkpoint-complete", self.attempt)
                    self.record.checkpoint_reported = True
                    await self.save()
            finally:
                done.set()

        self._tg.start_soon(watch_and_report)


def _wire(body: dict[str, Any]) -> dict[str, Any]:
    """The fields of a `complete` the wire knows (reason and message since issue 11)."""
    return {k: v for k, v in body.items() if k in Completion.model_fields}


def _remove_flat_dir(path: Path) -> None:
    """Remove a job's state directory: a handful of files, no subdirectories (the
    supervisor makes none). Inline, not in a thread: a few unlinks cost less than the hop."""
    try:
        names = os.listdir(path)
    except FileNotFoundError:
        return
    for name in names:
        try:
            os.unlink(path / name)
        except IsADirectoryError:
            shutil.rmtree(path / name, ignore_errors=True)
        except FileNotFoundError:
            pass
    with contextlib.suppress(OSError):
        os.rmdir(path)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _launch_record(state_dir: Path) -> dict[str, Any]:
    """supervisor.json, else spec.json (a supervisor that never started its workload)."""
    return read_json(state_dir / RECORD_FILE) or read_json(state_dir / SPEC_FILE) or {}
