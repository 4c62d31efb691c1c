"""Fixtures shared by the controller tests: a real SQLite store and an injected clock."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from jobd.api.models import Job
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
