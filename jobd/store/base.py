"""The Store protocol, split by who uses it: what the broker and its controllers need.

`Store` is the union of the parts: `JobStore`, `ArrayStore`, `ProjectStore`,
`WorkerStore` (each with `Transactions`: subscribe, batch, revision), `TokenStore`,
`ChangeFeedStore`, `Following`, `EventStore` and `Maintenance`. A consumer that needs
one part (the token table, the events.jsonl writer, the storage watch) names that part.

Every write is a compare-and-swap on `metadata.resource_version`, which is a global,
monotonic revision (like etcd's): the same number orders the change feed, so a watcher
that has seen revision N asks for everything after N. Events that a write justifies are
committed in the same transaction and handed to subscribers only after the commit.

Raises, for every method: `Conflict`, `NotFound` and `Gone` as each method says, and
`StoreUnavailable` when the database itself fails, which is part of the interface too:
`StorageFull` (a subclass) when a write could not be persisted (the disk is full, the
file is read-only or fails with I/O errors), the plain `StoreUnavailable` when the
database cannot be reached or opened at all. A write that raised either was not
committed: nothing of it is stored, and no listener hears of it. store/faults.py is the
one place that turns the drivers' errors into these.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple, Protocol

from pydantic_core import to_json

from jobd.api.arrays import JobArray
from jobd.api.models import MAX_ID, MAX_INT, Job, Phase, Project, Worker

__all__ = [
    "ArrayStore",
    "Change",
    "ChangeFeedStore",
    "ChangeWaiter",
    "CommitListener",
    "Conflict",
    "EventRecord",
    "EventStore",
    "Fencing",
    "Fits",
    "Following",
    "Gone",
    "JobStore",
    "Kind",
    "Maintenance",
    "NotFound",
    "NotLeader",
    "Op",
    "ProjectStore",
    "QueueHead",
    "Receipt",
    "ReceiptStore",
    "RunCharge",
    "StorageFull",
    "Store",
    "StoreUnavailable",
    "TokenRecord",
    "TokenStore",
    "Transactions",
    "UsageRecord",
    "UsageStore",
    "WorkerStore",
]

Kind = Literal["Job", "Project", "Worker"]
Op = Literal["ADDED", "MODIFIED", "DELETED"]


class Fits(NamedTuple):
    """The most any one worker has free of each: the queue's read skips a job bigger in
    any (`queue_head`). CPUs in thousandths, memory in bytes; unsaid: no bound."""

    slots: int
    gpus: int
    millicpus: int = MAX_ID  # an INTEGER column, as ids
    memory: int = MAX_INT


class QueueHead(Protocol):
    """Ready Pending jobs no bigger than `fits`, in the scheduler's order (priority, then
    id), after the keyset `after`, of one project if named: `JobStore.queue_head`."""

    def __call__(
        self,
        limit: int,
        fits: Fits,
        after: tuple[int, int] | None = None,
        project: str | None = None,
    ) -> list[Job]: ...


class UsageRecord(NamedTuple):
    """Decayed fair-share usage of a project (user "") or of a user in it: `value`,
    as it was worth at `at` (seconds since the epoch)."""

    project: str
    user: str
    value: float
    at: float


class RunCharge(NamedTuple):
    """What one run of a job used (`value`, worth at `at`), to charge to its project
    and, when it has one, its owner: once per (job, attempt)."""

    job: int
    attempt: int
    project: str
    user: str
    value: float
    at: float


class Receipt(NamedTuple):
    """The last request of a kind (`stream`: "reports", "events") a worker's agent had
    applied: one sent again after an unknown outcome (the same `run`, a `seq` not past
    this one) is acknowledged, never applied twice."""

    worker: str
    stream: str
    run: str  # the agent's run: made at each start of the agent
    seq: int  # its requests of this stream, counted from 1


class Conflict(Exception):
    """The object changed since the caller read it (stale resource_version) or exists."""


class NotFound(Exception):
    """No such object."""


class Gone(Exception):
    """The requested revision has been compacted away: list again, then watch."""


class StoreUnavailable(Exception):
    """The database could not be reached, opened or read: nothing was done (HTTP 503).

    The message says what failed and where, e.g. "the store at /var/lib/jobd/jobd.db
    could not be reached: unable to open database file".
    """


class NotLeader(StoreUnavailable):
    """A write of a broker that does not lead: refused, nothing of it committed (HTTP 503).

    Raised by a standby before anything is sent, and by a leader whose epoch the store no
    longer holds (another broker was elected while this one was paused or cut off), in
    the very transaction that would have written: the broker then steps down.
    """


class StorageFull(StoreUnavailable):
    """A write the database could not persist: nothing of it was committed (HTTP 507).

    A full disk above all ("the store at /var/lib/jobd/jobd.db could not write: database
    or disk is full"); also a read-only file and I/O errors on write.
    """


@dataclass(frozen=True)
class Change:
    """One committed write: the object after it (before it, for DELETED).

    `obj` is the very object the writer committed, so a listener reads it without
    parsing anything; it is shared, and nobody may change it (transitions write copies,
    see Job.evolve). `text` is its JSON document as stored.
    """

    revision: int
    kind: Kind
    op: Op
    key: str
    obj: Job | Project | Worker
    text: str

    @property
    def body(self) -> dict[str, Any]:
        """The document as a dict, parsed on each call: for the few who need a dict."""
        parsed: dict[str, Any] = json.loads(self.text)
        return parsed

    @property
    def job(self) -> Job | None:
        return self.obj if isinstance(self.obj, Job) else None


@dataclass
class EventRecord:
    """One line of events.jsonl; `fields` holds the event-specific extras."""

    event: str
    job: int | None = None
    worker: str | None = None
    fields: dict[str, Any] = field(default_factory=dict)
    ts: str = ""
    seq: int = 0

    def as_json(self, *, seq: bool = False) -> dict[str, Any]:
        """The event's fields; with `seq`, its place in the events table after `ts`."""
        line: dict[str, Any] = {"ts": self.ts, "seq": self.seq} if seq else {"ts": self.ts}
        line["event"] = self.event
        if self.job is not None:
            line["job"] = self.job
        if self.worker is not None:
            line["worker"] = self.worker
        line.update(self.fields)
        return line

    def fields_json(self) -> str:
        """`fields` as compact JSON: the store's row of this event."""
        return to_json(self.fields).decode()

    def line(self) -> str:
        """This event as one compact events.jsonl line (without its newline).

        The line carries `seq`, so whoever reads the file's last line knows where it
        stands in the table (the broker completes the file at start from there).
        """
        # pydantic's encoder, in Rust: json.dumps cost 3 µs of Python per small dict.
        return to_json(self.as_json(seq=True)).decode()


@dataclass(frozen=True)
class TokenRecord:
    """One bearer token as the store keeps it: its SHA-256 digest, never the token.

    `role` is admin, user or worker; `projects` scope a user token, `worker` a worker
    token. Times are RFC 3339 text, UTC, as events carry them.
    """

    label: str
    digest: str
    role: str
    projects: tuple[str, ...] = ()
    worker: str | None = None
    created_at: str = ""
    last_used_at: str | None = None
    user: str | None = None  # a user token's Unix user (api/identity.py)


CommitListener = Callable[[Sequence[Change], Sequence[EventRecord]], None]


class Maintenance(Protocol):
    """The database as such: schema, health, the WAL's copy (the broker's lifespan)."""

    where: str  # where the data is, for messages: a file, or a server's URL without password

    def migrate(self) -> None: ...
    def close(self) -> None: ...
    def checkpoint(self) -> None: ...
    def ping(self) -> bool: ...

    @property
    def write_error(self) -> StoreUnavailable | None:
        """Why the last write failed; None once a write (or `probe_write`) has succeeded."""
        ...

    def probe_write(self) -> None:
        """One small write transaction, to learn whether writes work again.

        Raises StoreUnavailable (StorageFull) as a write would; success clears
        `write_error`. It records nothing and no listener hears of it.
        """
        ...


class Transactions(Protocol):
    """The commits themselves: who hears of them, and writes that share one."""

    def revision(self) -> int: ...
    def subscribe(self, listener: CommitListener) -> None:
        """Call `listener` after every commit, in commit order, before the writer's call
        returns, and before any later commit is heard of.

        What a listener raises reaches the writer although its commit is durable, so a
        listener must not raise: the broker subscribes one, broker/wiring.py, which
        isolates its own. Reads from within a listener are safe (they take no lock).
        """
        ...

    def batch(self, durable: bool = False) -> AbstractContextManager[None]: ...
    def listen_on_this_thread(self) -> None:
        """Run listeners on the calling thread (the event loop's) from now on, whichever
        thread commits: a commit made elsewhere waits until the loop has delivered it."""
        ...


class JobStore(Transactions, Protocol):
    """Jobs: the verbs and the reconcile loops that create, move and read them."""

    def create_jobs(
        self,
        jobs: Sequence[Job],
        events_for: Callable[[Job], Iterable[EventRecord]] | None = None,
        on_ids: Callable[[list[Job]], None] | None = None,
    ) -> list[Job]: ...
    def update_job(
        self, job: Job, events: Iterable[EventRecord] = (), *, durable: bool = False
    ) -> Job: ...
    def delete_job(self, job: Job) -> None: ...
    def get_jobs(self, ids: Sequence[int]) -> list[Job]: ...
    def phases_of(self, ids: Sequence[int]) -> dict[int, Phase]: ...
    def expire_job(self, job: Job, events: Iterable[EventRecord] = ()) -> None:
        """Delete a finished job and its events (Conflict if changed, NotFound if gone);
        `events` are appended in the same commit."""
        ...

    def get_job(self, job_id: int) -> Job | None: ...
    def get_job_by_name(self, project: str, name: str) -> Job | None: ...
    def get_jobs_by_name(self, project: str, names: Sequence[str]) -> dict[str, Job]: ...
    def list_jobs(
        self,
        *,
        project: str | None = None,
        projects: Iterable[str] | None = None,  # any of these (a user token's scope)
        phases: Iterable[Phase] | None = None,
        worker: str | None = None,
        name: str | None = None,
        ready: bool | None = None,
        nominated: bool | None = None,
        after_id: int = 0,
        limit: int | None = None,
        by_priority: bool = False,
    ) -> list[Job]: ...
    def queue_head(
        self,
        limit: int,
        fits: Fits,
        after: tuple[int, int] | None = None,
        project: str | None = None,
    ) -> list[Job]: ...
    def hold_jobs(self, ids: Sequence[int]) -> None:
        """Inside a batch: these jobs are about to be written; a store may lock them now,
        all at once, so that each write of them waits for nothing (PostgreSQL does)."""
        ...

    def count_jobs_by_phase(self) -> dict[str, int]: ...
    def count_queued_ahead(self, priority: int, job_id: int) -> tuple[int, int]:
        """Ready Pending jobs before (priority, job_id) in the scheduler's order, and how
        many of those have a higher priority (`job explain`'s place in the queue)."""
        ...

    def children_of(self, job_id: int) -> list[int]: ...
    def parents(self) -> set[int]: ...  # every job some other job depends on


class ArrayStore(Transactions, Protocol):
    """Job arrays: an array's row beside its member jobs (verbs/arrays.py)."""

    def create_array(
        self,
        array: JobArray,
        members: Sequence[Job],
        on_id: Callable[[int], None],
        events_for: Callable[[Job], Iterable[EventRecord]] | None = None,
    ) -> JobArray:
        """Insert an array and its members in one transaction, all or nothing; `on_id`
        names them once the array's id is known. Conflict when a name is taken."""
        ...

    def get_array(self, array_id: int) -> JobArray | None: ...
    def get_array_by_name(self, project: str, name: str) -> JobArray | None: ...
    def list_arrays(
        self,
        *,
        project: str | None = None,
        projects: Iterable[str] | None = None,  # any of these (a user token's scope)
        name: str | None = None,
    ) -> list[JobArray]: ...
    def delete_array(self, array: JobArray) -> None: ...


class ProjectStore(Transactions, Protocol):
    """Projects: applied by users and the projects file, read by the cluster view."""

    def put_project(self, project: Project) -> Project: ...
    def get_project(self, name: str) -> Project | None: ...
    def list_projects(self) -> list[Project]: ...
    def delete_project(self, project: Project) -> None: ...


class WorkerStore(Transactions, Protocol):
    """Workers: registered and renewed by their agents, read by the cluster view."""

    def put_worker(self, worker: Worker, events: Iterable[EventRecord] = ()) -> Worker: ...
    def get_worker(self, name: str) -> Worker | None: ...
    def list_workers(self) -> list[Worker]: ...


class TokenStore(Protocol):
    """Bearer tokens, outside the revision and the change feed (broker/auth/tokens.py)."""

    def create_token(self, record: TokenRecord) -> None:
        """Store a new token; Conflict when its label (or digest) is taken."""
        ...

    def list_tokens(self) -> list[TokenRecord]: ...
    def delete_token(self, label: str) -> None:
        """Remove the token; NotFound when no token has this label."""
        ...

    def touch_tokens(self, last_used: dict[str, str]) -> None:
        """Record when each token (by label) was last used; unknown labels are skipped."""
        ...


class ChangeFeedStore(Protocol):
    """The change feed: what watchers behind the broker's tail read, and its compaction."""

    def changes_since(self, revision: int, limit: int = 1000) -> list[Change]: ...
    def compact(self, keep: int) -> int: ...


class ChangeWaiter(Protocol):
    """A LISTEN connection: the newest revision another commit notified (follow.py)."""

    async def wait(self, timeout_s: float) -> int | None: ...


class Following(Protocol):
    """Other brokers' commits to the same PostgreSQL store, heard in revision order with
    this broker's own, by the same listeners (store/sql/follow.py)."""

    @property
    def heard(self) -> int: ...  # the newest revision the listeners were handed
    def follow_from(self, revision: int) -> None: ...
    def follow(self, notified: int | None = None, limit: int = 1000) -> int:
        """Hand the listeners the changes after `heard`, at most `limit`; how many.
        Gone when one was compacted before it was read."""
        ...

    def change_signal(self) -> AbstractAsyncContextManager[ChangeWaiter]: ...


class EventStore(Protocol):
    """The event record: appended by workers, read by `job events` and events.jsonl."""

    def append_events(self, events: Iterable[EventRecord]) -> None: ...
    def list_events(
        self,
        *,
        job: int | None = None,
        event: str | None = None,
        after_seq: int = 0,
        limit: int = 1000,
        projects: Iterable[str] | None = None,  # only events of these projects' jobs
    ) -> list[EventRecord]: ...
    def last_event_seq(self) -> int: ...  # the newest event's seq; 0 for none
    def raise_counters(self, floors: Mapping[str, int]) -> dict[str, int]:
        """Raise id counters (`job_id`, `event_seq`) to at least `floors`; the old values."""
        ...


class ReceiptStore(Protocol):
    """What the agents' requests applied (Receipt), claimed inside the batch
    (`Transactions.batch`) that applies them, so a receipt moves exactly when its
    request's writes commit."""

    def claim_delivery(self, worker: str, stream: str, run: str, seq: int) -> bool:
        """Record the request as applied; False (nothing recorded) when it was already."""
        ...

    def receipt_of(self, worker: str, stream: str) -> Receipt | None: ...


class UsageStore(Protocol):
    """Fair share's usage (controllers/fairshare.py), kept across restarts."""

    def list_usage(self) -> list[UsageRecord]: ...
    def charge_usage(self, runs: Sequence[RunCharge], half_life_s: float) -> list[RunCharge]:
        """Charge these runs in one transaction, each once: the ones charged now (a run
        charged before is left out)."""
        ...

    def queued_projects(self) -> dict[int, str]: ...  # ready queued job id -> its project


class Fencing(Protocol):
    """Whose writes the store takes: every caller's, or only the elected leader's.

    Unfenced (a SQLite store, `jobd token`, a test) every write is taken. A broker on
    PostgreSQL fences its store: `fence(0)` as a standby (every write refused with
    NotLeader before anything is sent), `fence(epoch)` once elected (each write
    transaction checks in itself that the store still holds that epoch).
    """

    def fence(self, epoch: int | None) -> None:
        """None: unfenced; 0: refuse every write; N: write only while epoch N leads."""
        ...

    def on_fenced_out(self, callback: Callable[[int], None]) -> None:
        """Call `callback(epoch)` when a write finds its epoch gone (from the writing thread)."""
        ...

    def end_idle_transactions(self, after_s: float) -> None:
        """Have the database end a transaction of this store left idle past `after_s`."""
        ...


class Store(
    Fencing,
    Maintenance,
    UsageStore,
    ReceiptStore,
    JobStore,
    ArrayStore,
    ProjectStore,
    WorkerStore,
    TokenStore,
    ChangeFeedStore,
    Following,
    EventStore,
    Protocol,
):
    """Persistence for resources, their change feed and the event record: every part."""
