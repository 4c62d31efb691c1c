"""A PostgreSQL server a test starts, stops and restarts itself: never the shared one.

Tests of what a broker does when its database goes away need a server they may take
down: `initdb` and `pg_ctl` of the machine's PostgreSQL, a data directory under /tmp,
its own port on 127.0.0.1 and its own socket directory. As root the server runs as the
`postgres` user (PostgreSQL refuses to run as root). Without the programs the test
skips, and fails when CI=true (tests/conftest.py's rule for PostgreSQL).
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

__all__ = ["OwnPostgres", "own_postgres", "pg_programs"]


def pg_programs() -> Path | None:
    """The newest installed PostgreSQL's bin directory holding initdb and pg_ctl."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=_major)
    return Path(found[-1]).parent if found else None


def _major(path: str) -> int:
    part = Path(path).parents[1].name
    return int(part) if part.isdigit() else 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class OwnPostgres:
    """One server: `start`, `stop`, `restart` (fast, as `pg_ctl restart -m fast`)."""

    def __init__(self, bin_dir: Path) -> None:
        self.bin_dir = bin_dir
        self.root = Path(tempfile.mkdtemp(prefix="jobd-own-pg-"))
        self.data = self.root / "data"
        self.port = _free_port()
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        self._as_postgres = os.geteuid() == 0
        if self._as_postgres:  # the server's user must own what it writes
            owner = pwd.getpwnam("postgres")
            os.chown(self.root, owner.pw_uid, owner.pw_gid)
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust", "--no-sync")

    def _run(self, program: str, *args: str, timeout: float = 60) -> None:
        argv = [str(self.bin_dir / program), *args]
        if self._as_postgres:
            argv = ["runuser", "-u", "postgres", "--", *argv]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd="/")
        if done.returncode != 0:
            raise RuntimeError(f"{program} failed: {done.stdout}{done.stderr}")

    def _options(self) -> str:
        # No fsync: a test's server is never power-cycled; a fast stop still writes all.
        return (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -c fsync=off"
            f" -c unix_socket_directories={self.root} -c max_connections=60"
        )

    def _pg_ctl(self, action: str, *args: str) -> None:
        # The server's output to a file: a pipe of ours would keep `_run` waiting on it.
        log = str(self.root / "server.log")
        self._run("pg_ctl", action, "-D", str(self.data), "-l", log, "-w", *args)

    def start(self) -> None:
        self._pg_ctl("start", "-o", self._options())

    def stop(self) -> None:
        self._pg_ctl("stop", "-m", "fast")

    def restart(self) -> None:
        self._pg_ctl("restart", "-m", "fast", "-o", self._options())

    def running(self) -> bool:
        return (self.data / "postmaster.pid").exists()

    def remove(self) -> None:
        if self.running():
            self._pg_ctl("stop", "-m", "immediate")
        shutil.rmtree(self.root, ignore_errors=True)

    def wait_gone(self, timeout_s: float = 10.0) -> None:
        """Until the server's port refuses connections."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
            except OSError:
                return
            time.sleep(0.05)
        raise AssertionError(f"PostgreSQL on port {self.port} did not stop")


@pytest.fixture
def own_postgres() -> Iterator[OwnPostgres]:
    """A running server of the test's own, removed afterwards."""
    bin_dir = pg_programs()
    if bin_dir is None:
        reason = "no PostgreSQL programs (initdb, pg_ctl) under /usr/lib/postgresql"
        if os.environ.get("CI", "").strip().lower() in {"true", "1"}:
            pytest.fail(f"CI=true and {reason}", pytrace=False)
        pytest.skip(reason)
    server = OwnPostgres(bin_dir)
    try:
        server.start()
        yield server
    finally:
        server.remove()
