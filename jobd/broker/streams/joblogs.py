"""Job output shipped by workers, kept as one capped file per job under the broker's log dir.

Appends and reads are by byte offset, so `job logs -f` from any machine resumes exactly
where it left off; followers are woken when bytes arrive or the job ends. Each job keeps
at most `max_bytes` (its head and its newest bytes, see outputfile.py); a reader that
crosses what was dropped gets a line saying how many bytes were dropped there.

A multi-host job's members ship their output apart, each with its rank: each is kept in
a file of its own (`job logs ID --rank R`), and the job's own log interleaves their lines,
each behind `[rank R] ` (interleaving.py). A job of one node writes and reads its one file,
as it always did.

Who may write: a job bound to a worker (Scheduled on: its agent may start it before its
`started` report lands), until `grace_s` after it ended, for chunks still on their way
(completion is reported apart from log shipping, which may lag behind a full disk).
Anything else is refused (409): a job that has not started, has long ended, or bytes at
an offset already written that differ from those held. A POST to a future job's id no
longer writes anything, since no such job exists yet (404).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from jobd.api.models import Job, Phase, Project, Worker
from jobd.broker.streams.feed import Notifier
from jobd.broker.streams.interleaving import Interleaving
from jobd.broker.streams.logtimes import ArrivalTimes
from jobd.broker.streams.outputfile import OutputConflict, OutputFile, Read
from jobd.controllers.errors import TransitionError
from jobd.logconfig import get_logger
from jobd.store.base import Change, EventRecord, StorageFull

__all__ = ["DEFAULT_MAX_LOG_BYTES", "JobLogs", "LogRead", "dropped_note"]

DEFAULT_MAX_LOG_BYTES = 1 << 30
log = get_logger()


def dropped_note(n: int, new_line: bool) -> bytes:
    """What a reader sees where output was dropped: one line of its own."""
    return (b"\n" if new_line else b"") + f"[jobd: {n:,} bytes dropped here]\n".encode()


@dataclass(frozen=True)
class LogRead:
    data: bytes  # the output, or the note of a drop
    next_offset: int
    end: int  # the output's end, as the broker holds it


class JobLogs:
    def __init__(
        self, log_dir: Path, max_bytes: int = DEFAULT_MAX_LOG_BYTES, grace_s: float = 3600.0
    ) -> None:
        self.dir = log_dir / "jobs"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.max_bytes = max_bytes
        self.grace = timedelta(seconds=grace_s)
        self._notifiers: dict[int, Notifier] = {}
        # When each job's output last arrived, since this broker started (the idle guard).
        self._last_output: dict[int, datetime] = {}
        # The multi-host jobs whose members sent output since this broker started, until
        # they end: their last unended lines are copied when they do (on_commit).
        self._gangs: set[int] = set()

    def path(self, job_id: int, rank: int | None = None) -> Path:
        """The job's log (interleaved, for a multi-host job), or one rank's of a gang."""
        return self.dir / (f"{job_id}.log" if rank is None else f"{job_id}.rank{rank}.log")

    def output(self, job_id: int, rank: int | None = None) -> OutputFile:
        return OutputFile(self.path(job_id, rank), self.max_bytes)

    def times(self, job_id: int, rank: int | None = None) -> ArrivalTimes:
        return ArrivalTimes(
            self.dir / (f"{job_id}.times" if rank is None else f"{job_id}.rank{rank}.times")
        )

    def interleaving(self, job_id: int) -> Interleaving:
        return Interleaving(self.output(job_id), self.dir / f"{job_id}.merged")

    def notifier(self, job_id: int) -> Notifier:
        return self._notifiers.setdefault(job_id, Notifier())

    def append(self, job: Job, offset: int, data: bytes, now: datetime, rank: int = 0) -> int:
        """Write `data` at the worker's `offset` of member `rank`'s output; a chunk sent
        again is not written twice.

        Raises TransitionError (409) for a job that takes no output now (or has no such
        rank), or bytes that differ from those already written, StorageFull (507) for a
        full log disk.
        """
        self._check_writable(job, now)
        if rank or job.spec.nodes > 1:
            return self._append_member(job, rank, offset, data, now)
        try:
            end = self.output(job.id).append(offset, data)
        except OutputConflict as exc:
            raise TransitionError(f"job {job.id}'s output: {exc}") from None
        if data:
            self._stamp(job.id, offset, now)
            self._last_output[job.id] = now
            self.wake(job.id)
        return end

    def _append_member(self, job: Job, rank: int, offset: int, data: bytes, now: datetime) -> int:
        """append() for member `rank` of a multi-host job: its own file, then its new whole
        lines into the job's interleaved log."""
        if rank >= job.spec.nodes:
            nodes = job.spec.nodes
            raise TransitionError(f"job {job.id} has no rank {rank}: it runs on {nodes} node(s)")
        try:
            end = self.output(job.id, rank).append(offset, data)
        except OutputConflict as exc:
            raise TransitionError(f"job {job.id}'s output (rank {rank}): {exc}") from None
        self._gangs.add(job.id)
        self._interleave(job, rank, now)  # also for a chunk sent again: a copy cut short resumes
        if data:
            self._stamp(job.id, offset, now, rank)
            self._last_output[job.id] = now
            self.wake(job.id)
        return end

    def _interleave(self, job: Job, rank: int, now: datetime) -> None:
        """Copy the rank's new whole lines into the job's interleaved log (all of what is
        left, once the job has ended)."""
        start = self.output(job.id).end()
        ended = job.status.phase.terminal
        if self.interleaving(job.id).catch_up(rank, self.output(job.id, rank), ended):
            self._stamp(job.id, start, now)

    def last_output(self, job_id: int) -> datetime | None:
        """When output of the job last arrived: as heard since start, else the file's time.

        What the idle guard (controllers/guards.py) measures silence from.
        """
        held = self._last_output.get(job_id)
        if held is not None:
            return held
        try:
            mtime = self.path(job_id).stat().st_mtime
        except OSError:
            return None
        return datetime.fromtimestamp(mtime, UTC)

    def _stamp(self, job_id: int, offset: int, now: datetime, rank: int | None = None) -> None:
        """Note when this output arrived, for `--since`: worth no failure of the append."""
        try:
            self.times(job_id, rank).stamp(offset, now.timestamp())
        except OSError as exc:
            log.warning("log_times_not_written", job=job_id, error=str(exc))

    def _check_writable(self, job: Job, now: datetime) -> None:
        status = job.status
        if status.worker is None and status.phase in (Phase.PENDING, Phase.SCHEDULED):
            raise TransitionError(f"job {job.id} has not started: it has no output yet")
        if status.phase.terminal and status.worker is None and status.started_at is None:
            raise TransitionError(f"job {job.id} never ran: it has no output")
        ended = status.finished_at
        if status.phase.terminal and ended is not None and now - ended > self.grace:
            raise TransitionError(
                f"job {job.id} ended at {ended.isoformat()}: output is accepted until "
                f"{self.grace.total_seconds():g} s after a job's end"
            )

    def start(
        self,
        job_id: int,
        offset: int,
        tail: int | None,
        since_s: float | None,
        now: datetime,
        rank: int | None = None,
    ) -> int:
        """Where a read asked to start: at `offset`, or later for the last `tail` lines or
        the output that arrived in the last `since_s` seconds (both: the later)."""
        if tail is not None:
            offset = max(offset, self.output(job_id, rank).start_of_last_lines(tail))
        if since_s is not None:
            end = self.output(job_id, rank).end()
            cutoff = now.timestamp() - since_s
            offset = max(offset, self.times(job_id, rank).offset_since(cutoff, end))
        return offset

    def read(
        self, job_id: int, offset: int, limit: int = 1 << 20, rank: int | None = None
    ) -> LogRead:
        """The job's output from `offset`: its interleaved log, or rank `rank`'s of a gang
        (None: the job's own)."""
        output = self.output(job_id, rank)
        found: Read = output.read(offset, limit)
        end = output.end()
        if found.dropped:
            new_line = output.byte_before(offset) not in (b"", b"\n")
            return LogRead(dropped_note(found.dropped, new_line), found.next_offset, end)
        return LogRead(found.data, found.next_offset, end)

    def notifiers(self) -> list[Notifier]:
        return list(self._notifiers.values())

    def on_commit(self, changes: Sequence[Change], events: Sequence[EventRecord]) -> None:
        """A job that changed (ended, above all) releases its `job logs -f` followers;
        a job whose retention ran out (`job_expired`) loses its output files."""
        for change in changes:
            if change.kind == "Job":
                job_id = int(change.key)
                if change.op == "DELETED":
                    self._last_output.pop(job_id, None)
                    self._gangs.discard(job_id)
                elif job_id in self._gangs:  # a set's lookup: what every commit pays
                    self._flush_ended_gang(change.obj)
                self.wake(job_id)
        for event in events:
            if event.event == "job_expired" and event.job is not None:
                self.remove(event.job)

    def wake_all(self) -> None:
        """Every follower looks again: what to do after missing a commit."""
        for job_id in list(self._notifiers):
            self.wake(job_id)

    def wake(self, job_id: int) -> None:
        notifier = self._notifiers.pop(job_id, None)
        if notifier is not None:
            notifier.notify()

    def _flush_ended_gang(self, job: Job | Project | Worker) -> None:
        """A multi-host job that has ended: its members' last lines, even those without
        their newline, join its interleaved log (a chunk arriving later joins at once)."""
        if not isinstance(job, Job) or not job.status.phase.terminal:
            return
        self._gangs.discard(job.id)
        for rank in range(job.spec.nodes):
            if self.path(job.id, rank).exists():
                self._interleave_logged(job, rank)

    def _interleave_logged(self, job: Job, rank: int) -> None:
        """_interleave for a commit's listener: a full log disk is logged, not raised."""
        try:
            self._interleave(job, rank, datetime.now(UTC))
        except (OSError, StorageFull) as exc:
            log.warning("gang_log_not_interleaved", job=job.id, rank=rank, error=str(exc))

    def remove(self, job_id: int) -> None:
        self.output(job_id).remove()
        self.times(job_id).remove()
        for ranked in self.dir.glob(f"{job_id}.rank*.log"):  # a multi-host job's members
            rank = int(ranked.name.removeprefix(f"{job_id}.rank").removesuffix(".log"))
            self.output(job_id, rank).remove()
            self.times(job_id, rank).remove()
        self.interleaving(job_id).remove()
