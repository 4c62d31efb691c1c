"""One job on this host: its environment, its process, its output, its stop and its end.

The seed's worker steps live here: SIGTERM to the whole scope or process group when the
broker sets `signal`, the job's grace, then SIGKILL; the sentinel watched for on stdout
during the grace window only (byte-exact, across reads), reported once acknowledged
and before `/complete`, from which the final phase flows.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import IO, ClassVar

import anyio
import anyio.abc

from jobd.api.models import Job
from jobd.worker.checkpoints import ensure_checkpoint_dir, find_resume_target
from jobd.worker.reporting import BrokerLink, LogShipper
from jobd.worker.runner import Handle, LaunchSpec, Runner
from jobd.worker.sentinel import SentinelScanner

__all__ = [
    "Execution",
    "WorkerSettings",
    "effective_grace",
    "workload_env",
]

# Never inherited by a workload: the token, the store URL (it may hold a password) and
# every other setting of jobd's own; the workload's JOBD_* variables are set below.
_PRIVATE_PREFIX = "JOBD_"
# How long `started` waits to be told together with `complete`: a job that is over by
# then costs the broker one report, and its slot comes back a round trip sooner.
STARTED_REPORT_DELAY_S = 0.005


@dataclass
class WorkerSettings:
    name: str
    slots: int
    gpus: list[int]
    checkpoint_root: Path
    default_grace_s: float
    output_dir: Path  # local copy of every job's output
    checkpoint_ttl_days: float | None = None  # None: keep every checkpoint directory
    base_env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))


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
    return env


def effective_grace(job: Job, settings: WorkerSettings) -> float:
    """Job spec > project default (both resolved by the broker) > this worker's default."""
    grace = job.status.effective.checkpoint_grace_s
    return settings.default_grace_s if grace is None else grace


def _fmt(seconds: float) -> str:
    return str(int(seconds)) if float(seconds).is_integer() else str(seconds)


class Execution:
    """The life of one job's workload on this worker."""

    def __init__(
        self, job: Job, settings: WorkerSettings, runner: Runner, link: BrokerLink
    ) -> None:
        self.job, self.settings, self.runner, self.link = job, settings, runner, link
        self.handle: Handle | None = None
        self.scanner = SentinelScanner()
        self.armed = False  # the sentinel only counts during the grace window
        self.stopping = False
        self.exited = False
        self.started = anyio.Event()
        self._started_told = False
        self._started_reported = anyio.Event()  # told, or left to go with `complete`
        self._report_started_now = anyio.Event()  # ends STARTED_REPORT_DELAY_S early
        self._checkpoint_reported: anyio.Event | None = None
        self._tg: anyio.abc.TaskGroup | None = None

    @property
    def job_id(self) -> int:
        return self.job.id

    @property
    def attempt(self) -> int:
        """The run this is (`status.attempt` when it was bound): every report says it."""
        return self.job.status.attempt

    async def run(self) -> None:
        """Start, supervise and report the workload until it has ended and been reported."""
        ckpt = ensure_checkpoint_dir(self.settings.checkpoint_root, self.job_id)
        shipper = LogShipper(self.link, self.job_id)
        with _LocalCopy(self.settings.output_dir / f"{self.job_id}.log") as local:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                tg.start_soon(shipper.run)
                result = await self._start_and_wait(ckpt, local, shipper)
                shipper.close()
            if self._checkpoint_reported is not None:
                await self._checkpoint_reported.wait()
            latest = find_resume_target(ckpt)
            complete = {
                "attempt": self.attempt,
                "exit_code": result[0],
                "signal": result[1],
                "checkpoint_latest": str(latest) if latest != ckpt else str(ckpt) + "/",
            }
            reports = [("complete", complete)]
            if self.handle is not None and not self._started_told:
                reports.insert(
                    0, ("started", {"attempt": self.attempt, "checkpoint_dir": f"{ckpt}/"})
                )
            await self.link.report_many(self.job_id, reports)
            self.link.event("process_exited", self.job_id, exit_code=result[0], signal=result[1])

    async def _start_and_wait(
        self, ckpt: Path, local: _LocalCopy, shipper: LogShipper
    ) -> tuple[int | None, int | None]:
        job = self.job
        spec = LaunchSpec(
            argv=list(job.spec.command),
            cwd=job.spec.cwd or str(Path.home()),
            env=workload_env(job, self.settings, ckpt),
            unit_name=f"jobd-job-{job.id}",
        )
        try:
            self.handle = await self.runner.start(spec)
        except OSError as exc:
            message = f"jobd: cannot start {job.spec.command[0]!r} in {spec.cwd}: {exc.strerror}\n"
            local.write(message.encode())
            shipper.write(message.encode())
            self.link.event("spawn_failed", job.id, error=str(exc))
            self.started.set()
            return 127, None
        self.started.set()
        self.link.event("process_started", job.id, pid=self.handle.pid, unit=spec.unit_name)
        assert self._tg is not None
        self._tg.start_soon(self._report_started, ckpt)
        ends = [anyio.Event(), anyio.Event()]
        async with anyio.create_task_group() as pumps:
            pumps.start_soon(self._pump, self.handle.stdout, local, shipper, ends[0], True)
            pumps.start_soon(self._pump, self.handle.stderr, local, shipper, ends[1], False)
            result = await self.handle.wait()
            self.exited = True
            self._report_started_now.set()
            # The rest of the group was killed with it, so the pipes reach EOF promptly;
            # the bound only guards against a process that escaped the group.
            with anyio.move_on_after(2):
                for end in ends:
                    await end.wait()
            pumps.cancel_scope.cancel()
        return result.exit_code, result.signal

    async def _pump(
        self,
        stream: anyio.abc.ByteReceiveStream,
        local: _LocalCopy,
        shipper: LogShipper,
        end: anyio.Event,
        is_stdout: bool,
    ) -> None:
        try:
            async for chunk in stream:
                local.write(chunk)
                shipper.write(chunk)
                if is_stdout and self.armed and self.scanner.feed(chunk):
                    self._on_sentinel()
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass
        finally:
            end.set()
            await stream.aclose()

    def _on_sentinel(self) -> None:
        self._checkpoint_reported = done = anyio.Event()
        self.link.event("checkpoint_sentinel_seen", self.job_id)

        async def report() -> None:
            await self.link.report(self.job_id, "checkpoint-complete", attempt=self.attempt)
            done.set()

        assert self._tg is not None
        self._tg.start_soon(report)

    async def _report_started(self, ckpt: Path) -> None:
        """Tell the broker the workload runs, unless it is over within a few ms.

        Then `started` goes with `complete` in one request instead (see run). Reports
        keep their order, so `complete` never overtakes a `started` sent here.
        """
        with anyio.move_on_after(STARTED_REPORT_DELAY_S):
            await self._report_started_now.wait()
        if not self.exited:
            self._started_told = True
            await self.link.report(
                self.job_id, "started", attempt=self.attempt, checkpoint_dir=f"{ckpt}/"
            )
        self._started_reported.set()

    async def kill_if_running(self, report_within_s: float = 3.0) -> None:
        """SIGKILL the whole job unless its main process was already seen to exit.

        The broker is told at once (as far as it answers within `report_within_s`), so
        the job ends Failed now rather than Lost and then Failed a lease later.
        """
        if self.handle is None or self.exited:
            return
        self.link.event("job_killed_on_shutdown", self.job_id)
        await self.handle.signal(signal.SIGKILL)
        with anyio.move_on_after(report_within_s):
            await self.link.report(
                self.job_id, "complete", attempt=self.attempt, signal=signal.SIGKILL
            )

    async def stop(self, reason: str) -> None:
        """SIGTERM the whole job, wait its grace, SIGKILL what is left."""
        if self.stopping:
            return
        self.stopping = True
        await self.started.wait()
        if self.handle is None or self.exited:
            return  # over already (a job whose end the broker heard first): nothing to stop
        self._report_started_now.set()  # the broker hears `started` before `stopping`
        await self._started_reported.wait()
        grace = effective_grace(self.job, self.settings)
        self.armed = reason == "preempt"
        self.scanner.reset()
        self.link.event("signal_sent", self.job_id, signal="SIGTERM", reason=reason, grace_s=grace)
        async with anyio.create_task_group() as tg:
            tg.start_soon(partial(self.link.report, self.job_id, "stopping", attempt=self.attempt))
            result = await self.handle.stop(grace, signal.SIGTERM)
        if result.signal == signal.SIGKILL:
            self.link.event("signal_sent", self.job_id, signal="SIGKILL", reason="grace_expired")


class _LocalCopy:
    """The worker's own copy of a job's output, created with the first byte.

    Most short jobs print nothing; creating a file for each cost more than running
    them.
    """

    _made_dirs: ClassVar[set[Path]] = set()

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file: IO[bytes] | None = None

    def write(self, data: bytes) -> None:
        if self._file is None:
            if self.path.parent not in self._made_dirs:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._made_dirs.add(self.path.parent)
            self._file = self.path.open("ab")
        self._file.write(data)
        self._file.flush()

    def __enter__(self) -> _LocalCopy:
        return self

    def __exit__(self, *_exc: object) -> None:
        if self._file is not None:
            self._file.close()
