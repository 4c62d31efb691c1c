"""The in-memory tail of the change feed that watchers long-poll.

The store's `changes` table is the durable feed; this keeps its newest entries in
memory so that a thousand watching workers cost one list scan each per change, not
one query. A watcher that fell behind the buffer is served from the store, and one
behind the store's compaction gets 410 Gone and lists again. A commit the tail failed
to take in is handled by `rebuild`: the tail starts afresh after it, so it never has a
hole, and watchers behind its start are served from the store.

The tail keeps what a watch needs of each change — its JSON text (and, for a job that
holds secret env values, the text with them masked: what everyone but its worker reads)
and what a watch filters jobs by (worker, project, name, phase; labels are read from the
text, only for a watch that asks for them) — not the committed objects: tens of
thousands of jobs' models (two dozen objects each), kept alive only here, were most of
the memory and of what the garbage collector walked.
"""

from __future__ import annotations

import bisect
import json
from collections import deque
from collections.abc import Callable, Sequence
from typing import NamedTuple

import anyio

from jobd.api.models import Job
from jobd.api.secrets import mask_job
from jobd.api.selectors import Selector
from jobd.broker.http.responses import doc
from jobd.store.base import Change, EventRecord, Store

__all__ = ["ChangeFeed", "FeedEntry", "Filter", "Notifier", "jobs_filter"]


class FeedEntry(NamedTuple):
    """One change as a watch answers it: plain strings and numbers, one object a change."""

    revision: int
    kind: str
    op: str
    text: str
    worker: str | None  # the worker a job is bound to; None for anything else
    project: str | None  # a job's project, a project's name; None for a worker
    masked: str  # `text` as all but the job's worker read it: `text` itself, mostly
    name: str | None = None  # a job's name; None for anything else
    phase: str | None = None  # a job's phase
    signal: str | None = None  # a job's status.signal
    started: bool = False  # a job's status.started_at is set
    # A multi-host job's other members' workers, comma-separated (rank 0's is `worker`);
    # None for a job of one node. Plain text, as every field here is.
    members: str | None = None

    @classmethod
    def of(cls, change: Change) -> FeedEntry:
        job = change.job
        if job is None:
            text, project = change.text, _project_name(change)
            return cls(change.revision, change.kind, change.op, text, None, project, text)
        masked = change.text if mask_job(job) is job else str(doc(job))
        return cls(
            change.revision,
            change.kind,
            change.op,
            change.text,
            job.status.worker,
            job.project,
            masked,
            job.metadata.name,
            job.status.phase.value,
            job.status.signal,
            job.status.started_at is not None,
            ",".join(m.worker for m in job.status.members[1:]) or None,
        )

    def bound_to(self, worker: str) -> bool:
        """Whether the change is of a job bound to `worker` (a gang: any member's)."""
        return self.worker == worker or (
            self.members is not None and worker in self.members.split(",")
        )

    def labels(self) -> dict[str, str] | None:
        """A job's labels, read from its text (only a watch with a selector asks)."""
        labels: dict[str, str] | None = json.loads(self.text).get("metadata", {}).get("labels")
        return labels


def _project_name(change: Change) -> str | None:
    return change.key if change.kind == "Project" else None


Filter = Callable[[FeedEntry], bool]


def jobs_filter(
    project: str | None,
    name: str | None,
    phases: Sequence[str] | None,
    selector: Selector | None,
) -> Filter | None:
    """What a listing's filters pass of the feed (the jobs it would list); None: all."""
    if project is None and name is None and not phases and selector is None:
        return None
    wanted = frozenset(phases or ())

    def accept(entry: FeedEntry) -> bool:
        return (
            entry.kind == "Job"
            and (project is None or entry.project == project)
            and (name is None or entry.name == name)
            and (not wanted or entry.phase in wanted)
            and (selector is None or selector.matches(entry.labels()))
        )

    return accept


class Notifier:
    """A broadcast wake-up: every waiter wakes on the next `notify()`.

    Once closed (the broker is stopping) waits return at once, so no long-poll holds up
    a shutdown.
    """

    def __init__(self) -> None:
        # Made by the first wait after a notify: a commit nobody waits for makes none
        # (three notifiers hear each commit; an anyio.Event costs microseconds to make).
        self._event: anyio.Event | None = None
        self.closed = False

    def notify(self) -> None:
        event, self._event = self._event, None
        if event is not None:
            event.set()

    async def wait(self, timeout_s: float) -> None:
        if self.closed:
            return
        if self._event is None:
            self._event = anyio.Event()
        event = self._event
        with anyio.move_on_after(timeout_s):
            await event.wait()

    def close(self) -> None:
        self.closed = True
        self.notify()


class ChangeFeed:
    def __init__(self, store: Store, size: int = 20_000) -> None:
        self.store = store
        self.revision = store.revision()
        self._buffer: deque[FeedEntry] = deque(maxlen=size)
        self._revs: deque[int] = deque(maxlen=size)
        self.changed = Notifier()
        self.events_added = Notifier()
        # A worker's watch wakes only for its own jobs' changes: a thousand idle workers
        # must not all wake for every change.
        self._per_worker: dict[str, Notifier] = {}

    def notifier_for(self, worker: str | None) -> Notifier:
        if worker is None:
            return self.changed
        return self._per_worker.setdefault(worker, Notifier())

    def notifiers(self) -> list[Notifier]:
        return [self.changed, self.events_added, *self._per_worker.values()]

    def on_commit(self, changes: Sequence[Change], events: Sequence[EventRecord]) -> None:
        if changes:
            entries = [FeedEntry.of(change) for change in changes]
            self._buffer.extend(entries)
            self._revs.extend(entry.revision for entry in entries)
            self.revision = entries[-1].revision
            workers = {entry.worker for entry in entries if entry.worker is not None}
            workers.update(w for e in entries if e.members for w in e.members.split(","))
            for worker in workers & self._per_worker.keys():
                self._per_worker[worker].notify()
            self.changed.notify()
        if events:
            self.events_added.notify()

    def document(self, job: Job) -> str | None:
        """`job`'s document as users read it (secret values masked), as the tail took it
        in at the job's last write; None when that write is not in the tail.

        A create answers with it: the text the commit made of the job already, where
        serializing the job again cost a create 7 % of its instructions.
        """
        rev, revs = job.metadata.resource_version, self._revs
        if rev is None or not revs or not revs[0] <= rev <= revs[-1]:
            return None
        at = bisect.bisect_left(revs, rev)
        entry = self._buffer[at]
        return entry.masked if revs[at] == rev and entry.kind == "Job" else None

    def rebuild(self) -> None:
        """Forget the tail and wake every watcher: each looks again, from the store.

        Changes after this go into the tail as usual; a watcher asking for anything older
        than its first is answered from the changes table (or told 410 Gone).
        """
        self._buffer.clear()
        self._revs.clear()
        for notifier in self.notifiers():
            notifier.notify()
        self.revision = self.store.revision()

    def since(self, revision: int, accept: Filter, limit: int = 1000) -> list[FeedEntry]:
        if self._revs and revision + 1 >= self._revs[0]:
            start = bisect.bisect_right(self._revs, revision)
            picked = []
            for i in range(start, len(self._buffer)):
                if accept(self._buffer[i]):
                    picked.append(self._buffer[i])
                    if len(picked) >= limit:
                        break
            return picked
        if revision >= self.revision:
            return []
        stored = map(FeedEntry.of, self.store.changes_since(revision, limit))
        return [entry for entry in stored if accept(entry)]

    async def wait_since(
        self, revision: int, accept: Filter, timeout_s: float, worker: str | None = None
    ) -> tuple[int, list[FeedEntry]]:
        """Changes after `revision` that pass `accept`, waiting up to timeout_s for one.

        With `worker`, `accept` must pass only that worker's jobs: the wait wakes for
        those alone.
        """
        notifier = self.notifier_for(worker)
        deadline = anyio.current_time() + timeout_s
        while True:
            seen = self.revision
            found = self.since(revision, accept)
            if found:
                return found[-1].revision, found
            revision = max(revision, seen)
            left = deadline - anyio.current_time()
            if left <= 0 or notifier.closed:
                return revision, []
            await notifier.wait(left)
