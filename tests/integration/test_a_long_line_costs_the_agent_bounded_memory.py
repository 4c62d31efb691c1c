"""Shipping a job's output holds a bounded amount of memory however much it prints
(issue 21: the agent's RSS grew 62 -> 101 MB as a job printed one 50 MB line).

The scanners reading the output (progress lines, the sentinel) were bounded already; the
memory was the shipped chunks themselves, kept alive after their requests by httpx's
reference cycles until the cyclic collector ran, which the daemons' tuning (a young pass
per 20,000 allocations) made rare. Here: the agent's real follower and client, through a
real socket to a small HTTP server, under the daemons' collector settings; the bytes
Python holds are counted (tracemalloc) once the output is shipped.
"""

from __future__ import annotations

import gc
import json
import threading
import tracemalloc
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import anyio
import pytest

from jobd.wire.client import AsyncClient
from jobd.wire.plain_async import PlainAsyncClient
from jobd.worker.following import CHUNK_BYTES, OutputFollower
from jobd.worker.jobrecord import JobRecord
from jobd.worker.progress import ProgressScanner
from jobd.worker.reporting import BrokerLink

pytestmark = pytest.mark.anyio

PRINTED = 128 * CHUNK_BYTES  # 32 MiB on one line, no newline
HELD_AT_MOST = 8 * 1024 * 1024  # SWEEP_BYTES of garbage at most, and a chunk or two


class _Logs(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the broker: the pool is reused

    def do_POST(self) -> None:
        taken = len(self.rfile.read(int(self.headers["Content-Length"])))
        body = json.dumps({"offset": taken}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def broker() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Logs)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def daemons_collector() -> Iterator[None]:
    """The collector as `jobd dev` sets it (daemon/main._tune_gc): the harder case, as
    `jobd worker` keeps CPython's more frequent young passes."""
    before = gc.get_threshold()
    gc.collect()
    gc.set_threshold(20_000, 20, 20)
    try:
        yield
    finally:
        gc.set_threshold(*before)


# The agent's client for http:// (h11) and the one it takes for https:// (httpx).
@pytest.mark.parametrize("make_client", [PlainAsyncClient, AsyncClient])
async def test_one_long_line_is_shipped_in_bounded_memory(
    broker: str,
    tmp_path: Path,
    daemons_collector: None,
    make_client: type[PlainAsyncClient | AsyncClient],
) -> None:
    with open(tmp_path / "stdout", "wb") as out:
        for _ in range(PRINTED // CHUNK_BYTES):
            out.write(b"x" * CHUNK_BYTES)
    (tmp_path / "stderr").write_bytes(b"")
    record = JobRecord(1, 1)
    scanner = ProgressScanner()

    async def save() -> None:
        pass

    async with make_client(broker, "jobd_token") as client:
        follower = OutputFollower(
            BrokerLink(client, "w1"), tmp_path, record, save, 1 << 40, on_stdout=scanner.feed
        )
        follower.finished.set()
        tracemalloc.start()
        try:
            with anyio.fail_after(120):
                await follower.run()
            held, _peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert record.stdout_offset == PRINTED and record.log_offset == PRINTED
    assert held < HELD_AT_MOST, f"{held / 2**20:.1f} MiB held after shipping 32 MiB"
    assert len(scanner._carry) <= 4096  # the progress scanner skips the line, holds none
