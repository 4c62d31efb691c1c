"""Connections that send nothing cannot take a real `jobd broker` down (issue 21, item 3).

Through real sockets to a real broker whose RLIMIT_NOFILE is lowered to 1024 (so a
flood of about 1,500 connections is what 20,000 were to a broker of 20,000 descriptors):
idle connections, and one that stalls inside its head, are closed once the head timeout
passes; one address beyond loopback gets no more than its cap, answered 503, while
loopback is not capped; past the descriptors kept in reserve a new connection closes the
oldest waiting one, so `/healthz` and an authenticated request still answer during the
flood. Each refusal is counted by reason on `/metrics`. The floods come from 127.0.0.2
and up (all loopback on Linux) and from this host's own address; the requests that must
answer come from 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import os
import re
import resource
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.harness import BIN

TOKEN = "t" * 40
FD_LIMIT = 1024


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _lower_fd_limit() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (FD_LIMIT, FD_LIMIT))


@contextlib.contextmanager
def _broker(root: Path, *flags: str) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JOBD_", "XDG_DATA_HOME"))}
    env.update(JOBD_DATA_DIR=str(root / "data"), JOBD_LOG_DIR=str(root / "logs"))
    env.update(JOBD_TOKEN=TOKEN)
    with (root / "broker.log").open("wb") as log:
        process = subprocess.Popen(
            [str(BIN / "jobd"), "broker", "--port", str(port), *flags],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=_lower_fd_limit,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while not _answers(url):
            assert process.poll() is None, (root / "broker.log").read_text()
            assert time.monotonic() < deadline, "the broker did not start"
            time.sleep(0.05)
        yield url, process
    finally:
        process.terminate()
        process.wait(10)


def _answers(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=2).status_code == 200
    except httpx.TransportError:
        return False


def _idle(url: str, count: int, first_source: int) -> list[socket.socket]:
    """count connections that send nothing, 100 from each source address from
    127.0.0.<first_source> on."""
    port = int(url.rsplit(":", 1)[1])
    opened = []
    for n in range(count):
        s = socket.socket()
        s.bind((f"127.0.0.{first_source + n // 100}", 0))
        s.connect(("127.0.0.1", port))
        opened.append(s)
    return opened


def _closed(s: socket.socket) -> bool:
    """Has the broker closed s (whatever it said first)? Never blocks."""
    try:
        while s.recv(4096, socket.MSG_DONTWAIT):
            pass  # what it said before closing
    except BlockingIOError:
        return False
    except ConnectionResetError:
        pass
    return True


def _everything_said(s: socket.socket) -> bytes:
    """What the broker sends on s until it closes it."""
    s.settimeout(60)
    said = b""
    with contextlib.suppress(ConnectionResetError):
        while data := s.recv(4096):
            said += data
    return said


def _refused(metrics: str, reason: str) -> float:
    found = re.search(
        rf'^jobd_connections_refused_total{{reason="{reason}"}} (\S+)$', metrics, re.M
    )
    return float(found.group(1)) if found else 0.0


def _metrics(url: str) -> str:
    return httpx.get(f"{url}/metrics", timeout=10).text


def _still_served(url: str) -> None:
    """/healthz and an authenticated read answer, from loopback's own address."""
    assert httpx.get(f"{url}/healthz", timeout=10).status_code == 200
    auth = {"Authorization": f"Bearer {TOKEN}"}
    assert httpx.get(f"{url}/workers", headers=auth, timeout=10).status_code == 200


def test_connections_that_send_no_head_are_closed_after_the_head_timeout(
    tmp_path: Path,
) -> None:
    with _broker(tmp_path, "--http-head-timeout", "1") as (url, _):
        flood = _idle(url, 300, first_source=2)
        stalled = _idle(url, 1, first_source=9)[0]
        stalled.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # and never the end
        kept = _idle(url, 1, first_source=9)[0]
        kept.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert kept.recv(4096).startswith(b"HTTP/1.1 200")
        kept.sendall(b"GET /healthz HTT")  # kept alive, then a next head that stalls
        waiting = [*flood, stalled, kept]
        deadline = time.monotonic() + 60
        while waiting:
            _still_served(url)
            waiting = [s for s in waiting if not _closed(s)]
            assert time.monotonic() < deadline, f"{len(waiting)} idle connections still open"
            time.sleep(0.2)
        assert _refused(_metrics(url), "head_timeout") >= 302
    assert '"connections_refused"' in (tmp_path / "broker.log").read_text()


def _own_address() -> str:
    """This host's address on its default route (no packet is sent), else a skip."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("10.255.255.255", 9))
        except OSError:
            pytest.skip("no address beyond loopback here, and loopback is not capped")
        address = str(probe.getsockname()[0])
    if address.startswith("127."):
        pytest.skip("no address beyond loopback here, and loopback is not capped")
    return address


def _idle_from(address: str, port: int, count: int) -> list[socket.socket]:
    opened = []
    for _ in range(count):
        s = socket.socket()
        s.bind((address, 0))
        s.connect((address, port))
        opened.append(s)
    return opened


def test_one_address_gets_its_cap_and_a_503_beyond_and_loopback_none(tmp_path: Path) -> None:
    own = _own_address()
    flags = ("--host", "0.0.0.0", "--http-head-timeout", "2", "--max-client-connections", "40")
    with _broker(tmp_path, *flags) as (url, _):
        port = int(url.rsplit(":", 1)[1])
        flood = _idle_from(own, port, 60)
        local = _idle(url, 60, first_source=2)  # this host's own: not capped
        _still_served(url)
        answers = [_everything_said(s) for s in flood]  # the admitted: closed, unanswered
        refused = [a for a in answers if a.startswith(b"HTTP/1.1 503")]
        assert len(refused) == 20 and b"too many connections from this address" in refused[0]
        assert answers.count(b"") == 40
        assert [_everything_said(s) for s in local] == [b""] * 60  # none answered 503
        assert _refused(_metrics(url), "per_client") == 20


def test_a_flood_past_the_descriptors_leaves_healthz_and_reports_answering(
    tmp_path: Path,
) -> None:
    flags = ("--http-head-timeout", "600", "--max-client-connections", "0")
    with _broker(tmp_path, *flags, "--fd-reserve", "256") as (url, process):
        flood = _idle(url, 1500, first_source=2)
        for _ in range(5):
            _still_served(url)
        held = len(os.listdir(f"/proc/{process.pid}/fd"))
        assert held < FD_LIMIT
        assert _refused(_metrics(url), "reserve") >= 1500 - (FD_LIMIT - 256)
        assert sum(not _closed(s) for s in flood) <= FD_LIMIT - 256
