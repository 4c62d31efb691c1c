"""Fixtures for the end-to-end tests (helpers live in harness.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.e2e.harness import Jobd, start_jobd, stop_jobd

# A PostgreSQL server of the test's own, for the tests that take it down: pytest finds
# the fixture here, so no test module imports it by name.
from tests.own_postgres import own_postgres  # noqa: F401


@pytest.fixture(scope="module")
def jobd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Jobd]:
    """One `jobd dev` per test module: two slots, the sweeper's thresholds at defaults."""
    running = start_jobd(tmp_path_factory.mktemp("jobd"), "--slots", "2")
    yield running
    stop_jobd(running)
