"""What every controller is handed: the store, its caches, the clock, settings, wake-ups."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from jobd.api.models import Worker
from jobd.controllers.clock import Clock, SystemClock
from jobd.controllers.fairshare import Billing, Usage
from jobd.controllers.observed import ObservedTime
from jobd.controllers.view import ClusterView
from jobd.store.base import Change, EventRecord, Store
from jobd.store.runner import StoreRunner

__all__ = ["Context", "LeaseTable", "Settings"]


@dataclass
class Settings:
    """Broker knobs (CONTRACT.md §2); tests shorten the thresholds, never sleep."""

    auto_preempt_queued_s: float = 300.0
    auto_preempt_min_runtime_s: float = 300.0
    sweep_interval_s: float = 300.0
    lost_timeout_s: float = 300.0
    default_grace_s: float = 60.0
    # A stretch longer than this between two looks at the clock (a stalled loop, a
    # suspended host) is time the broker did not observe: no deadline runs out on it.
    unobserved_gap_s: float = 5.0
    # How long a finished job is kept when neither it nor its project says
    # (`ttl_after_finished_s`); None: for ever (controllers/retention.py).
    finished_job_ttl_s: float | None = None
    # Fair share's billing weights and half-life (controllers/fairshare.py).
    billing: Billing = field(default_factory=Billing)


class LeaseTable(dict[str, datetime]):
    """The newest lease renewal of each worker, in memory, and who was heard since start.

    A heartbeat that changes nothing else writes nothing, so a thousand workers renewing
    cost no commits and wake no controller; `workers.last_renewal` takes the newer of this
    and the stored renewal. Committed Worker changes keep it in step with the store (a
    deleted worker leaves it, a stored renewal newer than the one held replaces it).

    `heard` holds the workers that registered or heartbeat to *this* broker process. A
    stored worker that shows Ready is only what an earlier broker believed: it is given
    nothing new until it speaks (capacity.schedulable).
    """

    def __init__(self) -> None:
        super().__init__()
        self.heard: set[str] = set()

    def heard_from(self, name: str, at: datetime) -> bool:
        """`name` registered or heartbeat at `at`; True the first time since start."""
        self.renewed(name, at)
        first = name not in self.heard
        self.heard.add(name)
        return first

    def on_commit(self, changes: Sequence[Change], _events: Sequence[EventRecord]) -> None:
        for change in changes:
            if change.kind != "Worker":
                continue
            if change.op == "DELETED":
                self.pop(change.key, None)
                self.heard.discard(change.key)
            elif isinstance(change.obj, Worker):
                self.renewed(change.key, change.obj.status.last_renewal)

    def renewed(self, name: str, at: datetime) -> None:
        """Keep `at` unless a newer renewal is already held."""
        held = self.get(name)
        if held is None or at > held:
            self[name] = at

    def resync(self, workers: Iterable[Worker], now: datetime) -> None:
        """Match the stored workers; one not held gets a full lease from `now`.

        That is the rule of a broker that just started (it has heard no heartbeat yet):
        a worker whose renewals this table missed is not called Lost for having missed them.
        """
        stored = {worker.name: worker for worker in workers}
        for name in self.keys() - stored.keys():
            del self[name]
        self.heard &= stored.keys()
        for name, worker in stored.items():
            self.setdefault(name, now)
            self.renewed(name, worker.status.last_renewal)


@dataclass
class Context:
    store: Store
    settings: Settings = field(default_factory=Settings)
    clock: Clock = field(default_factory=SystemClock)
    # Set by the manager: ask a controller to look at a key now.
    enqueue: Callable[[str, str], None] = lambda _controller, _key: None
    leases: LeaseTable = field(default_factory=LeaseTable)
    # A context used alone (tests, the bench) keeps its view current itself; the broker
    # passes False, and its wiring (broker/wiring.py) registers the caches in its order.
    follow_store: bool = True
    # When a job's output last reached the broker (None: never, or not known): the
    # broker's job logs say (broker/streams/joblogs.py); the idle guard asks (guards.py).
    last_output: Callable[[int], datetime | None] = lambda _job_id: None
    # Store work off the event loop, on a thread of its own (PostgreSQL: store/runner.py).
    off_loop: bool = False
    view: ClusterView = field(init=False)
    # Fair share's stored usage, held for the scheduler (controllers/fairshare.py).
    usage: Usage = field(init=False)
    observed: ObservedTime = field(init=False)
    runner: StoreRunner = field(init=False)

    def __post_init__(self) -> None:
        self.runner = StoreRunner(self.store, self.off_loop)
        self.view = ClusterView(self.store)
        self.usage = Usage.load(self.store.list_usage())
        self.observed = ObservedTime(self.clock, self.settings.unobserved_gap_s)
        if self.follow_store:
            self.store.subscribe(self.view.on_commit)
