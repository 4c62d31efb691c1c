"""Fixtures every test may use: a migrated store on each backend jobd supports.

`store_url` runs a test once on a SQLite file and once on a fresh PostgreSQL database.
Without a reachable server the PostgreSQL case skips on a developer's machine and fails
when CI=true, so CI can never pass by silently testing one backend.
"""

from __future__ import annotations

import importlib.util
import os
import secrets
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from jobd.store import SQLStore, normalize_url, open_store
from jobd.store.base import EventRecord
from jobd.store.sql import _Tx
from tests.events_doc import events_doc

# Root's `jobd broker` and `jobd worker` default to one Unix socket, /run/jobd/jobd.sock,
# and `job` looks there when no server is given: parallel tests would meet on it. No
# socket unless a test names one (the socket tests pass their own paths).
os.environ.setdefault("JOBD_SOCKET", "none")
# Many tests start jobd with no JOBD_* variable at all (a user's clean environment), so
# that is not enough: as root, the run also holds the default path with a plain file,
# which no broker or worker can bind and no `job` takes for a broker's socket.
ROOT_SOCKET = Path("/run/jobd/jobd.sock")
_HELD: list[Path] = []


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config, "workerinput") or os.geteuid() != 0 or ROOT_SOCKET.exists():
        return  # an xdist worker (the controller holds it), not root, or a real broker's
    if not ROOT_SOCKET.parent.exists():
        ROOT_SOCKET.parent.mkdir(mode=0o755)
        _HELD.append(ROOT_SOCKET.parent)
    ROOT_SOCKET.write_text("held by jobd's test run: no test may bind the default socket\n")
    _HELD.insert(0, ROOT_SOCKET)


def pytest_unconfigure(config: pytest.Config) -> None:
    for path in _HELD:
        if path.is_dir():
            path.rmdir()
        elif path.is_file():
            path.unlink()
    _HELD.clear()


PG_URL_ENV = "JOBD_TEST_PG_URL"
DEFAULT_PG_URL = "postgresql://postgres@127.0.0.1:5432/test"


# Tests that hold a command or a request to a wall-clock bound ("refused within a
# second", "read before the job's 2 s are up", "tail before `late` at 5 s"), by module or
# by test: `make test` runs them alone, after the parallel run, so the other workers' load
# cannot push them past it.
SERIAL = frozenset(
    {
        "tests/e2e/test_a_body_over_its_cap_reads_as_413_everywhere.py"
        "::test_a_client_waiting_for_100_continue_gets_413_and_the_close_at_once",
        "tests/e2e/test_a_weak_token_beyond_loopback_is_refused.py",
        "tests/e2e/test_finished_jobs_expire_with_their_logs.py",
        # tmux's resize under a loaded machine was once not seen by top within 20 s
        "tests/e2e/test_job_top_shows_gpus_and_jobs_at_80x24.py",
        "tests/e2e/test_the_everyday_cli.py::test_logs_tail_and_since",
        "tests/fuzz/test_hostile_bodies_are_refused_cheaply.py",
        "tests/integration/test_hostile_manifests_are_refused_fast.py",
        "tests/integration/test_supervisor_stops_a_job_with_its_grace.py",
    }
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.nodeid in SERIAL or item.nodeid.partition("::")[0] in SERIAL:
            item.add_marker(pytest.mark.serial)


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"true", "1"}


NO_TORCH = (
    "torch is not installed: `make torch` puts the CPU build of torch 2.13.0 (this host's "
    "wheel, pip's find-links) in .venv"
)


def require_torch() -> None:
    """For the tests of the torch examples: skip where torch is missing (a developer's
    machine without its wheel), fail when CI=true (.ci/run installs it: `make torch`).
    Looked up, not imported: a module that skips costs no `import torch`."""
    if importlib.util.find_spec("torch") is not None:
        return
    if _in_ci():
        pytest.fail(f"CI=true and {NO_TORCH}", pytrace=False)
    pytest.skip(NO_TORCH, allow_module_level=True)


def _admin_engine(url: str) -> sa.Engine:
    return sa.create_engine(
        normalize_url(url),
        isolation_level="AUTOCOMMIT",  # CREATE/DROP DATABASE cannot run in a transaction
        poolclass=sa.pool.NullPool,
        connect_args={"connect_timeout": 3},
    )


def _unreachable(url: str) -> str | None:
    """Why the server at `url` cannot be used, or None when it can."""
    engine = _admin_engine(url)
    try:
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
    except sa.exc.SQLAlchemyError as exc:
        return str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
    finally:
        engine.dispose()
    return None


@pytest.fixture(scope="session")
def postgres_admin_url() -> str:
    """The server's URL, checked once per session; the skip (or failure) is cached too."""
    url = os.environ.get(PG_URL_ENV, DEFAULT_PG_URL)
    problem = _unreachable(url)
    if problem is not None:
        shown = make_url(url).render_as_string(hide_password=True)
        reason = f"PostgreSQL not reachable at {shown} (set {PG_URL_ENV}): {problem}"
        if _in_ci():
            pytest.fail(f"CI=true and {reason}", pytrace=False)
        pytest.skip(reason)
    return url


@pytest.fixture
def postgres_url(postgres_admin_url: str) -> Iterator[str]:
    """A fresh, empty database of its own for one test, dropped afterwards."""
    name = f"jobd_t_{secrets.token_hex(6)}"
    admin = _admin_engine(postgres_admin_url)
    try:
        with admin.connect() as conn:
            conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
        try:
            yield (
                make_url(postgres_admin_url)
                .set(database=name)
                .render_as_string(hide_password=False)
            )
        finally:
            with admin.connect() as conn:
                conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        admin.dispose()


@pytest.fixture(
    params=[
        pytest.param("sqlite", id="sqlite"),
        pytest.param("postgresql", id="postgresql", marks=pytest.mark.postgres),
    ]
)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/jobd.db"
    url: str = request.getfixturevalue("postgres_url")
    return url


def _opened(url: str) -> Iterator[SQLStore]:
    opened = open_store(url)
    try:
        yield opened
    finally:
        opened.close()


@pytest.fixture
def store(store_url: str) -> Iterator[SQLStore]:
    """A migrated store on the backend of this parametrization, closed afterwards."""
    yield from _opened(store_url)


@pytest.fixture
def pg_store(postgres_url: str) -> Iterator[SQLStore]:
    """A migrated store on a PostgreSQL database of the test's own, closed afterwards."""
    yield from _opened(postgres_url)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def events_as_documented(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[None]:
    """Every event a test commits, held to docs/events.md: its name, its fields, each
    field's one type. A test that posts events no code makes (a forged or malformed
    worker event) says so with `@pytest.mark.forged_events`."""
    if request.node.get_closest_marker("forged_events"):
        yield
        return
    committed: list[EventRecord] = []
    add_events = _Tx.add_events

    def recording(tx: _Tx, events: Iterable[EventRecord]) -> None:
        records = list(events)
        add_events(tx, records)
        committed.extend(records)

    monkeypatch.setattr(_Tx, "add_events", recording)
    yield
    doc = events_doc()
    problems = sorted({p for ev in committed for p in doc.problems(ev.as_json(seq=True))})
    assert not problems, "events unlike docs/events.md:\n" + "\n".join(problems)


@pytest.fixture(autouse=True)
def _no_user_config(
    monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """`job` reads the user's contexts (~/.config/jobd/config.yaml); a developer's own must
    not steer the tests, so every test starts with none (tests of contexts set their own)."""
    missing = tmp_path_factory.getbasetemp() / "no-jobd-config.yaml"
    monkeypatch.setenv("JOBD_CONFIG", str(missing))
