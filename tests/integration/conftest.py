"""Fixtures and helpers shared by the integration tests: a real SQLite store, an injected
clock, and job documents for the broker's API."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from jobd.api.models import Job, Phase
from jobd.controllers.clock import FakeClock
from jobd.controllers.context import Context, Settings
from jobd.store.sql import open_store


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
