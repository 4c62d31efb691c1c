"""What every controller is handed: the store, its view, the clock, settings, wake-ups."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from jobd.controllers.clock import Clock, SystemClock
from jobd.controllers.view import ClusterView
from jobd.store.base import Store

__all__ = ["Context", "Settings"]


@dataclass
class Settings:
    """Broker knobs (CONTRACT.md §2); tests shorten the thresholds, never sleep."""

    auto_preempt_queued_s: float = 300.0
    auto_preempt_min_runtime_s: float = 300.0
    sweep_interval_s: float = 300.0
    lost_timeout_s: float = 300.0
    default_grace_s: float = 60.0


@dataclass
class Context:
    store: Store
    settings: Settings = field(default_factory=Settings)
    clock: Clock = field(default_factory=SystemClock)
    # Set by the manager: ask a controller to look at a key now.
    enqueue: Callable[[str, str], None] = lambda _controller, _key: None
    # Lease renewals live in memory: a heartbeat that changes nothing else writes nothing,
    # so a thousand workers renewing cost no commits and wake no controller.
    leases: dict[str, datetime] = field(default_factory=dict)
    view: ClusterView = field(init=False)

    def __post_init__(self) -> None:
        self.view = ClusterView(self.store)
