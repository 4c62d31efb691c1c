"""Fixtures and helpers shared by the integration tests: a real SQLite store, an injected
clock, the broker's app driven in-process, and job documents for its API."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Protocol

import anyio
import httpx
import pytest

from jobd.api.models import Job, Phase
from jobd.broker.app import create_app
from jobd.broker.state import BrokerConfig, BrokerState
from jobd.controllers.clock import FakeClock
from jobd.controllers.context import Context, Settings
from jobd.store.sql import open_store

# Fixtures of the supervisor tests, for every module that launches supervisors: pytest
# finds them here, so no test module imports them by name.
from tests.integration.supervised import child_subreaper, state_root  # noqa: F401


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def ctx(tmp_path: Path) -> Iterator[Context]:
    """Default settings; a test module that needs others defines its own `ctx`."""
    store = open_store(f"sqlite:///{tmp_path}/jobd.db")
    yield Context(store, Settings(), FakeClock())
    store.close()


def reread(ctx: Context, job: Job) -> Job:
    """The job as the store has it now."""
    found = ctx.store.get_job(job.id)
    assert found is not None
    return found


def job_document(name: str, **spec: Any) -> dict[str, Any]:
    """A Job document running `true`; keywords go into its spec."""
    return {
        "apiVersion": "jobd/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {"command": ["true"], **spec},
    }


def bind(api: httpx.AsyncClient, job_id: int, worker: str) -> None:
    """Bind a job to a worker as the scheduler would, for an app whose loops do not run.

    `api` is a client on httpx.ASGITransport; the job is written through its app's store.
    """
    store = api._transport.app.state.broker.store  # type: ignore[attr-defined]
    bound = store.get_job(job_id).evolve()
    bound.status.phase, bound.status.worker = Phase.SCHEDULED, worker
    store.update_job(bound)


TOKEN = "test-token"


@asynccontextmanager
async def broker_client(config: BrokerConfig) -> AsyncIterator[httpx.AsyncClient]:
    """A client of the broker's ASGI app, through httpx.ASGITransport, holding the token.

    The app's lifespan is not started, so no loop runs: what is asserted is what the API
    itself answers, and what a test does to the store by hand. On PostgreSQL the broker
    is elected first (it would be a standby, answering writes 503, until then).
    """
    app = create_app(config)
    await app.state.broker.leadership.campaign()
    transport = httpx.ASGITransport(app=app)
    headers = {"Authorization": f"Bearer {config.token}"}
    try:
        async with httpx.AsyncClient(
            transport=transport, base_url="http://jobd", headers=headers
        ) as client:
            yield client
    finally:
        app.state.broker.close()


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    """The broker's API on a fresh SQLite store in tmp_path."""
    config = BrokerConfig(data_dir=tmp_path / "data", log_dir=tmp_path / "logs", token=TOKEN)
    async with broker_client(config) as client:
        yield client


def broker_state(api: httpx.AsyncClient) -> BrokerState:
    """What the app behind `api` holds: its store, context, wiring."""
    state: BrokerState = api._transport.app.state.broker  # type: ignore[attr-defined]
    return state


class Waitable(Protocol):
    """What a long-poll waits on: the change feed's and the events' notifiers."""

    async def wait(self, timeout_s: float) -> None: ...


def wait_entered(monkeypatch: pytest.MonkeyPatch, notifier: Waitable) -> anyio.Event:
    """An event set when a request starts waiting on `notifier`, for a test to act on then.

    The request has read all it will answer from by the time it waits, so a change made
    after the event is one the wait must wake for: no guess at how long the request takes.
    """
    entered = anyio.Event()
    wait = notifier.wait

    async def signalling(timeout_s: float) -> None:
        entered.set()  # the test's task runs once this one blocks in wait(), not before
        await wait(timeout_s)

    monkeypatch.setattr(notifier, "wait", signalling)
    return entered


def bench_line(home: Path, *args: str) -> dict[str, Any]:
    """`jobd bench --json --size tiny ARGS` run as a user would, with `home` as its HOME
    and TMPDIR and no JOBD_* of the caller's: the one JSON line of its one scenario."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBD_")}
    env |= {"HOME": str(home), "TMPDIR": str(home)}
    done = subprocess.run(
        [sys.executable, "-m", "jobd", "bench", "--json", "--size", "tiny", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (line,) = [json.loads(text) for text in done.stdout.splitlines() if text.strip()]
    assert "error" not in line, line
    found: dict[str, Any] = line
    return found
