"""Job output shipped by workers, kept as one file per job under the broker's log dir.

Appends and reads are by byte offset, so `job logs -f` from any machine resumes exactly
where it left off; followers are woken when bytes arrive or the job ends.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from jobd.broker.feed import Notifier
from jobd.store.base import Change, EventRecord

__all__ = ["JobLogs"]


class JobLogs:
    def __init__(self, log_dir: Path) -> None:
        self.dir = log_dir / "jobs"
        self.dir.mkdir(parents=True, exist_ok=True)
        self._notifiers: dict[int, Notifier] = {}

    def path(self, job_id: int) -> Path:
        return self.dir / f"{job_id}.log"

    def notifier(self, job_id: int) -> Notifier:
        return self._notifiers.setdefault(job_id, Notifier())

    def append(self, job_id: int, offset: int, data: bytes) -> int:
        """Write `data` at the worker's `offset`; a retried chunk is not written twice."""
        path = self.path(job_id)
        size = path.stat().st_size if path.exists() else 0
        if offset < size:
            data = data[size - offset :]
        if data:
            with path.open("ab") as f:
                f.write(data)
            self.wake(job_id)
        return size + len(data)

    def notifiers(self) -> list[Notifier]:
        return list(self._notifiers.values())

    def on_commit(self, changes: Sequence[Change], _events: Sequence[EventRecord]) -> None:
        """A job that changed (ended, above all) releases its `job logs -f` followers."""
        for change in changes:
            if change.kind == "Job":
                self.wake(int(change.key))

    def wake_all(self) -> None:
        """Every follower looks again: what to do after missing a commit."""
        for job_id in list(self._notifiers):
            self.wake(job_id)

    def wake(self, job_id: int) -> None:
        notifier = self._notifiers.pop(job_id, None)
        if notifier is not None:
            notifier.notify()

    def read(self, job_id: int, offset: int, limit: int = 1 << 20) -> bytes:
        path = self.path(job_id)
        if not path.exists():
            return b""
        with path.open("rb") as f:
            f.seek(offset)
            return f.read(limit)

    def remove(self, job_id: int) -> None:
        self.path(job_id).unlink(missing_ok=True)
