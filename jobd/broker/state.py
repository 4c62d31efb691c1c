"""Everything one broker process holds, built once at start and shared by the routes."""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path

from starlette.requests import Request

from jobd.api.models import Job
from jobd.broker.auth.people import People
from jobd.broker.auth.tokens import Tokens
from jobd.broker.batching import CreateBatcher
from jobd.broker.leadership import Leadership, LeaderTimings
from jobd.broker.metrics.events import EventMetrics
from jobd.broker.metrics.fairshare import FairShareCollector
from jobd.broker.metrics.following import FollowerCollector
from jobd.broker.metrics.gpus import GpuReadings
from jobd.broker.metrics.leadership import LeaderCollector
from jobd.broker.metrics.registry import build_registry
from jobd.broker.notify.outbox import NotifyConfig, Outbox
from jobd.broker.storage import StorageWatch
from jobd.broker.streams.eventlog import DEFAULT_EVENTS_KEEP, DEFAULT_EVENTS_MAX_BYTES, EventLog
from jobd.broker.streams.feed import ChangeFeed
from jobd.broker.streams.following import Follower
from jobd.broker.streams.joblogs import DEFAULT_MAX_LOG_BYTES, JobLogs
from jobd.broker.wiring import Wiring, broker_listeners
from jobd.controllers.clock import Clock, SystemClock
from jobd.controllers.context import Context, Settings
from jobd.controllers.manager import Manager
from jobd.controllers.workers import await_known_workers
from jobd.logconfig import get_logger
from jobd.store.base import EventRecord, NotFound, Store
from jobd.store.sql import open_store, sqlite_url

__all__ = [
    "BrokerConfig",
    "BrokerState",
    "ensure_token",
    "job_or_404",
    "reported_job_or_404",
    "state_of",
]

log = get_logger()


@dataclass
class BrokerConfig:
    data_dir: Path
    log_dir: Path
    db_url: str | None = None
    token: str | None = None
    projects_file: Path | None = None
    settings: Settings = field(default_factory=Settings)
    compact_keep: int = 100_000
    max_log_bytes: int = DEFAULT_MAX_LOG_BYTES  # per job: the head and the newest bytes
    log_grace_s: float = 3600.0  # how long after its end a job's late output is taken
    events_max_bytes: int = DEFAULT_EVENTS_MAX_BYTES  # rotate events.jsonl past this; 0: never
    events_keep: int = DEFAULT_EVENTS_KEEP  # rotated events.jsonl files kept
    notify: NotifyConfig = field(default_factory=NotifyConfig)  # --webhook and its kin
    # `jobd dev`: the one user it serves, whose own jobs are admitted even as root
    # (they run as that user anyway); None: a root job needs its project's allow_root.
    trusted_owner: str | None = None
    admin_group: str | None = None  # its members are admins over the socket (root always is)
    # Brokers on one PostgreSQL store: the election's timings, and where clients reach
    # this one while it leads (broker/leadership.py).
    leader: LeaderTimings = field(default_factory=LeaderTimings)
    advertise_url: str = "http://127.0.0.1:8765"

    @property
    def store_url(self) -> str:
        return self.db_url or sqlite_url(self.data_dir)


def ensure_token(config: BrokerConfig) -> str:
    """JOBD_TOKEN when given, else `<data-dir>/admin.token`, created 0600 on first start."""
    if config.token and config.token.strip():  # a newline around it is no part of it
        return config.token.strip()
    path = config.data_dir / "admin.token"
    if path.exists():
        return path.read_text().strip()
    config.data_dir.mkdir(parents=True, exist_ok=True)
    token = secrets.token_urlsafe(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    return token


class BrokerState:
    """The parts are built first; then `wiring` registers their listeners in one place."""

    def __init__(self, config: BrokerConfig, clock: Clock | None = None) -> None:
        self.config = config
        self.token = ensure_token(config)
        self.store: Store = open_store(config.store_url)
        self.tokens = Tokens(self.store, self.token)
        self.events = EventLog(
            config.log_dir, self.store, config.events_max_bytes, config.events_keep
        )
        self.feed = ChangeFeed(self.store)
        # On PostgreSQL other brokers may share the store: their commits are heard from
        # the feed's revision on (streams/following.py), before this one writes anything.
        self.follows = not config.store_url.startswith("sqlite")
        if self.follows:
            self.store.follow_from(self.feed.revision)
        self.logs = JobLogs(config.log_dir, config.max_log_bytes, config.log_grace_s)
        clock = clock or SystemClock()
        # SQLite answers in microseconds, on the loop; PostgreSQL in round trips, off it.
        off_loop = not config.store_url.startswith("sqlite")
        self.ctx = Context(
            self.store, config.settings, clock, follow_store=False, off_loop=off_loop
        )
        self.ctx.last_output = self.logs.last_output
        self.manager = Manager(self.ctx)
        self.people = People(self.ctx.view.projects, config.admin_group)
        self.creates = CreateBatcher(self.ctx)
        self.gpu_readings = GpuReadings()  # each worker's newest, from its heartbeats
        self.metrics = build_registry(self.store, self.ctx.view, self.feed, self.gpu_readings)
        self.event_metrics = EventMetrics(self.metrics, self.ctx.view)
        self.metrics.register(FairShareCollector(self.ctx))
        config.data_dir.mkdir(parents=True, exist_ok=True)
        self.outbox = Outbox(
            self.store, self.ctx.runner, config.notify, config.data_dir / "notify-outbox.json"
        )
        self.metrics.register(self.outbox.collector())
        self.wiring = Wiring(
            broker_listeners(
                self.ctx,
                self.feed,
                self.manager,
                self.logs,
                self.events,
                self.event_metrics,
                self.outbox,
            )
        )
        self.store.subscribe(self.wiring.on_commit)
        self.leadership = _leadership(self.store, config)
        self.metrics.register(LeaderCollector(self.leadership))
        if self.leadership.is_leader:  # else once elected (`lead`): a standby writes nothing
            # After the wiring, so events.jsonl has the events too.
            await_known_workers(self.ctx)
        if self.events.behind:  # completing the file at start failed: retried until it works
            self.wiring.stale.add("events_file")
        self.storage = StorageWatch(self.store, self.manager, self.wiring, self.events)
        self.follower = Follower(self.store, self.ctx.runner, self.feed, self.wiring)
        if self.follows:
            self.metrics.register(FollowerCollector(self.follower))
        self.tasks_down: dict[str, str] = {}  # lifespan loops that failed, until restarted

    async def lead(self, epoch: int) -> None:
        """Elected: the in-memory state rebuilt from the store, as a broker's start builds
        it, then `leader_elected` written (fenced by the new epoch, after the commit that
        took the lease). The loops start after this (app.py)."""
        ctx = self.ctx
        async with ctx.runner.quiet():
            ctx.leases.clear()  # heartbeats went to the old leader: each worker gets a lease
            ctx.leases.heard.clear()
            self.wiring.resync()
            self.events.complete()
            await_known_workers(ctx)
            fields = {"epoch": epoch, "url": self.config.advertise_url}
            self.store.append_events([EventRecord("leader_elected", fields=fields)])

    def release_waiters(self) -> None:
        """Answer every long-poll now: the broker is about to stop."""
        for notifier in [*self.feed.notifiers(), *self.logs.notifiers()]:
            notifier.close()

    def close(self) -> None:
        try:
            self.tokens.flush()  # when each token was last used, if the store takes it
        except Exception as exc:
            log.warning("token_use_not_recorded", error=str(exc))
        self.events.close()
        self.store.close()


def _leadership(store: Store, config: BrokerConfig) -> Leadership:
    """On PostgreSQL an election (a standby until it wins); on SQLite, the leader."""
    url = config.store_url
    if url.startswith("sqlite"):
        return Leadership(store, config.advertise_url)
    # A leader paused inside a write transaction holds the lease row's fence: the
    # server ends such a transaction once the leader would have stepped down anyway.
    store.end_idle_transactions(config.leader.renew_deadline_s)
    return Leadership.on_postgresql(store, url, config.advertise_url, config.leader)


def state_of(request: Request) -> BrokerState:
    state: BrokerState = request.app.state.broker
    return state


def job_or_404(state: BrokerState, job_id: int) -> Job:
    job = state.store.get_job(job_id)
    if job is None:
        raise NotFound(f"job {job_id} not found")
    return job


def reported_job_or_404(state: BrokerState, job_id: int) -> Job:
    """The job a worker reports on: usually bound, so read from the cluster view.

    The view is current with every commit, and transitions write copies (Job.evolve),
    so its object serves as the read without a query.
    """
    bound = state.ctx.view.bound.get(job_id)
    return bound if bound is not None else job_or_404(state, job_id)
