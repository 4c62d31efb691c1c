"""The worker agent: register, renew the lease, follow bound jobs, reconcile processes.

The agent never polls for work: it long-polls the broker's watch for changes to jobs
bound to it, so a job starts milliseconds after it is scheduled. Each change is
reconciled against the local processes: a Scheduled job with no process is started; a
job whose `signal` is set is stopped (SIGTERM, grace, SIGKILL); a job the broker no
longer binds here is stopped. The heartbeat carries the jobs it runs, so the broker can
reconcile the other direction. Each job runs under a shim (jobd.worker.shim) that
outlives the agent: at start the agent re-adopts every job an earlier agent left running
(or ended meanwhile) before it says anything to the broker, and on its way out it stops
none. One agent at a time runs as its worker: it locks its state directory and says its
instance id (identity.py); one the broker refuses, or fences off, stops (`refusal`).
Next stage: Execution, one per job attempt.
"""

from __future__ import annotations

import socket
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import anyio.abc

from jobd.api.vocabulary import Phase
from jobd.logconfig import get_logger
from jobd.wire import calls
from jobd.wire.errors import ApiError, BrokerUnreachable
from jobd.wire.informer import AsyncInformer, Delta, JobFilter
from jobd.wire.plain_async import open_async_client
from jobd.worker.address import default_address
from jobd.worker.cleanup import clean_checkpoints_forever
from jobd.worker.diskspace import DiskWatch, filled_the_disk
from jobd.worker.execution import Execution, Host
from jobd.worker.gangs import ready_to_launch
from jobd.worker.gpus import foreign_use, load_nvml, nvml_usage
from jobd.worker.identity import Refused, claim_state_dir
from jobd.worker.jobrecord import JobRecord
from jobd.worker.jobview import JobView
from jobd.worker.limits import (
    NO_ENFORCEMENT,
    CoreAllocator,
    detect_enforcement,
    pinnable_cores,
    remove_cgroup_parent,
    sweep_cgroups,
)
from jobd.worker.owners import PublishedUsers, closed_to_owners, runs_as_owners, runs_as_text
from jobd.worker.removal import Removals
from jobd.worker.reporting import BrokerLink
from jobd.worker.settings import WorkerSettings, attempt_of
from jobd.worker.shim.client import ShimPool, adopt
from jobd.worker.shim.containment import Containment, ProcessGroup, choose_containment
from jobd.worker.trimming import IdleTrim

__all__ = ["Agent"]

log = get_logger()
# How long a fenced-off agent gives its jobs' stops to be asked (each shim then carries
# its stop out alone, grace and SIGKILL).
_STAND_DOWN_S = 5.0
# How long the shim pool's warm-up at start may take before the agent goes on without it.
_WARM_UP_S = 10.0


class Agent:
    def __init__(
        self,
        server: str,
        token: str | None,
        settings: WorkerSettings,
        containment: Containment | None = None,
        lease_duration_s: float = 15.0,
    ) -> None:
        self.server, self.token, self.settings = server, token, settings
        self.containment = containment or choose_containment()
        self.lease_duration_s = lease_duration_s
        self.executions: dict[int, Execution] = {}
        self.failed_starts: set[tuple[int, int]] = set()  # (job, attempt): never again
        self.next_attempts: dict[int, JobView] = {}  # a retry's, once the last attempt is over
        self.pool = ShimPool()
        self.removals = Removals()  # over attempts' state directories (removal.py)
        # How a job's limits are enforced here (detected when the agent runs, if the
        # settings do not say), and the cores each running job holds.
        self.enforcement = settings.enforcement or NO_ENFORCEMENT
        self.cores = CoreAllocator(self.enforcement.cores)
        self._tg: anyio.abc.TaskGroup | None = None
        self.link: BrokerLink | None = None
        # NVML, where installed: each GPU's use, and what foreign processes take (gpus.py).
        self.nvml = load_nvml() if settings.gpus else None
        # Full: no new job here, and a job still filling it is ended (diskspace.py).
        self.disk = DiskWatch(settings.state_dir, self._end_disk_filler)
        # Why this agent may not run as its worker, once it stopped for that reason.
        self.refusal: str | None = None
        # Once no job has run here for a while, the heap a burst of jobs grew is given back.
        self.trimming = IdleTrim(lambda: bool(self.executions))
        self.users: PublishedUsers | None = None  # the owners placeable here, once looked up

    async def run(self) -> None:
        """Run until cancelled; return early, with `refusal` said, when this agent may not
        run as its worker (its state directory in use, or another instance holds it)."""
        try:
            identity = claim_state_dir(self.settings.state_dir)
        except Refused as exc:
            self.refusal = str(exc)
            return
        try:
            await self._run_as(identity.instance)
        except* Refused as refused:
            self.refusal = str(refused.exceptions[0])
            log.error("worker_refused", worker=self.settings.name, message=self.refusal)
        finally:
            identity.release()

    async def _run_as(self, instance: str) -> None:
        # A small pool: one connection for each request at once (the watch, a report batch,
        # a heartbeat); plain h11 for an http:// broker, httpx for https:// (plain_async.py).
        async with open_async_client(
            self.server, self.token, timeout=10.0, max_connections=4, user_agent="jobd-worker"
        ) as client:
            self.link = BrokerLink(client, self.settings.name, instance)
            try:
                async with anyio.create_task_group() as tg:
                    self._tg = tg
                    await self._warm_up_pool()
                    self._detect_enforcement()
                    sweep_cgroups(self.enforcement)  # before readopting: theirs hold processes
                    self._say_whom_jobs_run_as()
                    self._readopt()  # first: the heartbeat must name every job still ours
                    await self._register()
                    if not self.executions:  # what start-up allocated and let go is given back
                        self.trimming.went_idle()
                    await self._serve(tg)
            finally:
                # Jobs run on under their shims; idle shims exit as their pipes close.
                await self.pool.aclose()
                self.removals.finish()
                remove_cgroup_parent(self.enforcement)

    def _detect_enforcement(self) -> None:
        """What this host enforces, where the settings say nothing (an agent made in
        process: a test's, say), every core of the agent's pinnable."""
        if self.settings.enforcement is None:
            cores = pinnable_cores(declared_cpus=True, reserve_cpus=0)
            self.enforcement = detect_enforcement(self.settings.name, "auto", cores)
            self.cores = CoreAllocator(self.enforcement.cores)

    def _say_whom_jobs_run_as(self) -> None:
        """One line at start: a worker that is not root runs every job as itself. A root
        worker names the directories above its own that owners may not pass through."""
        if not runs_as_owners():
            log.warning(
                "jobs_run_as_worker_user",
                user=runs_as_text(),
                why="this worker is not root: every job runs as its user, whoever owns it",
            )
            return
        log.info("jobs_run_as_their_owners")
        settings = self.settings
        for closed in closed_to_owners(settings.state_dir, settings.checkpoint_root):
            log.warning(
                "owners_cannot_pass",
                path=str(closed),
                why="owners reach their checkpoint directories and output files through it",
                fix=f"chmod o+x {closed}, or give --state-dir and --checkpoint-root elsewhere",
            )

    async def _warm_up_pool(self) -> None:
        """Where shims are pooled, start an idle shim now (and keep one), before the agent
        says it is ready: the first job then costs what every other does."""
        if not isinstance(self.containment, ProcessGroup):
            return  # each shim is started in its job's scope
        try:
            with anyio.fail_after(_WARM_UP_S):
                await self.pool.warm_up(self.settings.state_dir / "warm-up")
        except Exception as exc:  # the first job starts a shim if it must
            log.warning("pool_warm_up_failed", error=f"{type(exc).__name__}: {exc}")

    async def _serve(self, tg: anyio.abc.TaskGroup) -> None:
        assert self.link is not None
        tg.start_soon(self.link.ship_events_forever)
        tg.start_soon(self._heartbeat_forever)
        tg.start_soon(self.disk.run)
        tg.start_soon(self.trimming.run)
        tg.start_soon(self.pool.run)  # retires spare idle shims
        if self.settings.checkpoint_ttl_days is not None:
            root, ttl = self.settings.checkpoint_root, self.settings.checkpoint_ttl_days
            tg.start_soon(clean_checkpoints_forever, self.link, root, ttl * 86400)
        await self._watch_forever()

    async def _register(self) -> None:
        assert self.link is not None
        spec = {
            "slots": self.settings.slots,
            "gpus": self.settings.gpus,
            "gpu_memory": self.settings.gpu_memory,
            "lease_duration_s": self.lease_duration_s,
            "cpus": self.settings.cpus,
            "memory": self.settings.memory,
            "labels": self.settings.labels,
            "mount_roots": self.settings.mount_roots,
            "enforcement": {"cpu": self.enforcement.cpu, "memory": self.enforcement.memory},
        }
        runner, link = self.containment.name, self.link
        self.users = PublishedUsers(self.settings.users)
        address = self.settings.advertise_address or await anyio.to_thread.run_sync(
            default_address, self.server
        )
        body = {
            "spec": spec,
            "hostname": socket.gethostname(),
            "runner": runner,
            "instance": link.instance,
            "runs_as": runs_as_text(),
            "users": self.users.users,
            "address": address,
        }
        call = calls.register_worker(self.settings.name, body)
        registered = await link.call(call, fenced=True)  # Refused: another instance holds it
        if registered is None:
            raise RuntimeError(f"the broker refused to register worker {self.settings.name}")
        link.epoch = registered.worker.get("status", {}).get("epoch")
        log.info(
            "worker_registered",
            worker=self.settings.name,
            runner=runner,
            slots=spec["slots"],
            cpus=spec["cpus"],
            memory=spec["memory"],
            labels=spec["labels"],
            mount_roots=spec["mount_roots"],
            runs_as=body["runs_as"],
            address=address,
            users=None if body["users"] is None else len(body["users"]),
            cpu_enforcement=self.enforcement.cpu,
            memory_enforcement=self.enforcement.memory,
            instance=link.instance,
            epoch=link.epoch,
        )

    async def _watch_forever(self) -> None:
        """List what is bound here and reconcile each, then each change from there; list
        again after a 410 or an error (the wire's informer)."""
        assert self.link is not None
        # Not the changes its own reports make (started, progress, complete): it acts on
        # none, and a drain's watch answers come with the binds alone.
        bound = JobFilter(worker=self.settings.name, skip_own_reports=True)
        informer = AsyncInformer(
            self.link.client, bound, every_listed=True, on_error=_log_watch_error
        )
        await informer.run(self._on_change)

    def _on_change(self, delta: Delta) -> None:
        if delta.op != "DELETED" and self._may_act_on(delta.object):
            self._reconcile(JobView(delta.object))

    def _may_act_on(self, document: dict[str, Any]) -> bool:
        """Whether _reconcile could act on this job: one running here, or one Scheduled (to
        start). The rest (the end of a job already gone from here: a third of a drain's
        changes) is passed over unread, no model built for it."""
        job_id = (document.get("metadata") or {}).get("id")
        phase = (document.get("status") or {}).get("phase")
        return job_id in self.executions or phase == Phase.SCHEDULED

    def running_jobs(self) -> int:
        """Jobs whose workload is still running here (they outlive this agent)."""
        return sum(1 for e in self.executions.values() if not e.over)

    def _readopt(self) -> None:
        """Take back every job attempt an earlier agent left under the state root."""
        root = self.settings.state_dir / "jobs"
        for state_dir in sorted(root.iterdir()) if root.is_dir() else []:
            try:
                self._readopt_one(state_dir)
            except Exception:  # one damaged directory must not keep the others
                log.exception("readopt_failed", state_dir=str(state_dir))

    def _readopt_one(self, state_dir: Path) -> None:
        assert self._tg is not None and self.link is not None
        record = JobRecord.load(state_dir)
        if record is None or record.drained:
            return  # a stranger, or over and shipped (kept by --keep-job-files)
        # A shim gone without a word leaves its job to the Execution, which kills what it
        # left (as the host's containment holds it) and waits until none of it runs.
        shim = adopt(state_dir)
        execution = Execution.readopted(state_dir, record, shim, self._host())
        ended = shim is None or shim.status() is not None
        self.link.event(
            "job_readopted",
            record.job_id,
            attempt=record.attempt,
            ended=ended,
            stopping=record.stop_reason,
            state_dir=str(state_dir),
        )
        self._supervise(execution)

    def _reconcile(self, job: JobView) -> None:
        """Drive local processes toward what the broker says about this job."""
        assert self._tg is not None and self.link is not None
        running = self.executions.get(job.id)
        name = self.settings.name
        if running is None:
            if job.status.members:
                self._reconcile_member(job)
            elif job.status.phase == Phase.SCHEDULED and job.status.worker == name:
                self._start_or_refuse(job)
            return
        if running.attempt < attempt_of(job) and job.bound_here(name):
            # A retry bound here again while the last attempt still ships its output: it
            # starts once that one is over (supervise).
            self.next_attempts[job.id] = job
        elif not job.bound_here(name) or job.status.phase.terminal:
            self._tg.start_soon(running.stop, "unbound")
        elif job.status.signal is not None:
            self._tg.start_soon(running.stop, job.status.signal)

    def _start_or_refuse(self, job: JobView) -> None:
        """Start what is bound here, unless it failed here already or was stopped first."""
        assert self._tg is not None and self.link is not None
        if (job.id, attempt_of(job)) in self.failed_starts:
            return  # failed alone already (start_failed, ...): never loop on it
        if job.status.signal is not None:
            # Stopped before it started: report at once, nothing to kill.
            report = partial(self.link.report, attempt=job.status.attempt)
            self._tg.start_soon(report, job.id, "complete")
            return
        self._start(job)

    def _reconcile_member(self, job: JobView) -> None:
        """This worker's member of a gang not yet running here: started once the gang is
        bound and, but for rank 0, once rank 0's port is known (worker/gangs.py)."""
        assert self.link is not None
        member = job.member(self.settings.name)
        if member is None or member.phase != Phase.SCHEDULED or job.status.phase.terminal:
            return
        if job.status.signal is None and not ready_to_launch(job, member):
            return  # the master has not said its port yet: the next change will
        self.link.ranks[job.id] = member.rank  # a refusal too says which member it is
        self._start_or_refuse(job)

    def _start(self, job: JobView) -> None:
        assert self.link is not None
        self._supervise(Execution.new(job, self._host()))

    def _end_disk_filler(self) -> None:
        for execution in list(self.executions.values()):
            why = None if execution.over else filled_the_disk(execution.state_dir)
            if why is not None and self._tg is not None:
                self._tg.start_soon(execution.end_for_full_disk, why)

    def _host(self) -> Host:
        assert self.link is not None
        return Host(
            self.settings,
            self.containment,
            self.link,
            self.pool,
            self.enforcement,
            self.cores,
            self.removals,
        )

    def _supervise(self, execution: Execution) -> None:
        assert self._tg is not None
        self.executions[execution.job_id] = execution

        async def supervise() -> None:
            # On shutdown (cancelled) nothing is killed and the job stays counted: its
            # shim carries on alone, and the next agent re-adopts it.
            try:
                await execution.run()
            except Exception:  # run() turns a job's errors into its failure; belt and braces
                log.exception("execution_failed", job=execution.job_id)
            if execution.failed:
                self.failed_starts.add((execution.job_id, execution.attempt))
            if self.executions.get(execution.job_id) is execution:
                del self.executions[execution.job_id]
                self.cores.release(execution.job_id)
                if self.link is not None:
                    self.link.ranks.pop(execution.job_id, None)
                following = self.next_attempts.pop(execution.job_id, None)
                if following is not None:
                    self._reconcile(following)
                if not self.executions:
                    self.trimming.went_idle()

        self._tg.start_soon(supervise)

    def _gpu_usage(self) -> tuple[dict[int, Any] | None, dict[int, int] | None]:
        """Each GPU's memory in use and utilisation, and the memory in use on GPUs no job
        here holds; (None, None) where NVML is absent."""
        if self.nvml is None:
            return None, None
        usage = nvml_usage(self.nvml, self.settings.gpus)
        held = {g for e in self.executions.values() if e.job for g in e.job.status.gpus}
        used = {g: int(u["memory_used"]) for g, u in usage.items()}
        return usage, foreign_use(used, held)

    def heartbeat_body(self) -> dict[str, Any]:
        """What the next heartbeat says (wire.models.Heartbeat's fields): the jobs running
        here, each one's attempt, what NVML reads of the GPUs (where it is), whether the
        disk is full."""
        usage, foreign = self._gpu_usage()
        body: dict[str, Any] = {
            "running": sorted(self.executions),
            "attempts": {i: e.attempt for i, e in self.executions.items()},
            "gpu_memory_foreign": foreign,
            "disk_full": self.disk.full,
        }
        users = None if self.users is None else self.users.changed()
        if users is not None:  # only then: most heartbeats say nothing of it
            body["users"] = users
        if usage is not None:  # only then: a broker older than the field takes the rest
            body["gpu_usage"] = usage
        return body

    async def _heartbeat_forever(self) -> None:
        assert self.link is not None
        interval = self.lease_duration_s / 3
        while True:
            await self.disk.changed_within(interval)
            body = self.link.signed(self.heartbeat_body())
            try:
                answer = await self.link.call(calls.heartbeat(self.settings.name, body), True)
            except Refused:
                await self._stand_down()
                raise
            if answer is None:
                await self._register()  # the broker forgot us (e.g. a fresh store)
                continue
            if self.users is not None:
                self.users.taken(body.get("users"))
            for job_id in answer.stop:
                execution = self.executions.get(job_id)
                if execution is not None:
                    assert self._tg is not None
                    self._tg.start_soon(execution.stop, "unknown_to_broker")

    async def _stand_down(self) -> None:
        """Fenced off: another instance took the worker over while this one was not heard
        (a paused host). The broker has ended this agent's jobs or will, and may run them
        elsewhere: stop them (they are this agent's own), so none runs twice."""
        with anyio.move_on_after(_STAND_DOWN_S):
            async with anyio.create_task_group() as tg:
                for execution in list(self.executions.values()):
                    tg.start_soon(execution.stop, "unknown_to_broker")


def _log_watch_error(exc: ApiError | BrokerUnreachable) -> None:
    if isinstance(exc, BrokerUnreachable):
        log.warning("watch_failed", error=exc.message)
    else:
        log.warning("watch_refused", status=exc.status, detail=exc.message)
