"""What every scenario is handed: the size, a scratch directory, progress, the broker.

`BenchContext.broker()` gives a scenario a broker to talk to: one it starts for itself in
its scratch directory, or the `--server` the user named (then the scenario measures that
broker, and cannot stop or inspect it).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TypeVar

import httpx

from jobd.bench.databases import backend_of, fresh_database
from jobd.bench.harness import BrokerProcess, Endpoint, Mode, client, running_broker
from jobd.bench.history import fill_store
from jobd.bench.progress import Progress
from jobd.store import open_store, sqlite_url
from jobd.wire import routes

__all__ = ["BenchContext", "Size", "Skipped"]

Size = Literal["tiny", "small", "full"]
T = TypeVar("T")

# Wall-clock budget of one scenario; every request loop also stops at it.
_BUDGET_S: dict[str, float] = {"tiny": 30.0, "small": 180.0, "full": 1200.0}


class Skipped(Exception):
    """The scenario cannot run in this setting; the message says why."""


@dataclass
class BenchContext:
    size: Size
    workdir: Path
    progress: Progress
    concurrency: int = 32
    server: Endpoint | None = None
    stored: int = 0  # jobs of history in each store before its broker starts (--stored)
    started: float = 0.0
    db: str | None = None  # a PostgreSQL server for the brokers' stores (JOBD_BENCH_DB)
    store: str | None = None  # the store of the last broker started (sqlite, postgresql)

    def sized(self, tiny: T, small: T, full: T) -> T:
        return {"tiny": tiny, "small": small, "full": full}[self.size]

    def scratch(self, name: str) -> Path:
        path = self.workdir / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def begin(self, scenario: str) -> None:
        self.started = time.monotonic()
        self.progress.begin(scenario)

    @property
    def budget_s(self) -> float:
        return _BUDGET_S[self.size]

    def time_left(self) -> float:
        """Seconds left of this scenario's budget (a margin kept for cleaning up)."""
        return self.budget_s * 0.8 - (time.monotonic() - self.started)

    @property
    def db_backend(self) -> str:
        """The store of the brokers the bench starts: sqlite or postgresql."""
        return backend_of(self.db)

    def require_own_broker(self, why: str) -> None:
        if self.server is not None:
            raise Skipped(f"skipped with --server: {why}")

    def endpoint(self, broker: BrokerProcess | None) -> Endpoint:
        """Where the broker a scenario was handed answers."""
        if broker is not None:
            return broker.endpoint
        assert self.server is not None
        return self.server

    @contextlib.asynccontextmanager
    async def broker(
        self,
        name: str,
        mode: Mode = "broker",
        connections: int = 64,
        slots: int = 8,
        env: dict[str, str] | None = None,
    ) -> AsyncIterator[tuple[httpx.AsyncClient, BrokerProcess | None]]:
        """A client of the broker to measure, and its process when the bench started it."""
        if self.server is not None:
            async with client(self.server, connections) as http:
                # A refused token fails here.
                await http.get(routes.LIST_JOBS.url(), params={"limit": 1})
                yield http, None
            return
        root = self.scratch(name)
        self.store = self.db_backend
        with contextlib.ExitStack() as stack:
            url = self._store_url(stack, name, root)
            if self.stored:
                self._fill(url)
            async with running_broker(root, mode, slots, url, env, connections=connections) as (
                b,
                http,
            ):
                yield http, b

    def _store_url(self, stack: contextlib.ExitStack, name: str, root: Path) -> str:
        """The SQLite file in the scenario's directory, or a fresh PostgreSQL database."""
        if self.db is None:
            return sqlite_url(root / "data")
        return stack.enter_context(fresh_database(self.db, name))

    def _fill(self, url: str) -> None:
        """The store the broker will open, with `stored` jobs of history in it already."""
        store = open_store(url)
        try:
            fill_store(store, self.stored, self.progress)
        finally:
            store.close()
