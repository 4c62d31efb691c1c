"""`job`, the SDK's clients and `jobd mcp` reach a broker's Unix socket: `unix:///PATH`.

A small HTTP server on a real Unix socket stands for the broker and records what it is
sent: the standard library's client (the CLI's), httpx's sync and async clients (the
SDK's) all reach it, and none sends a token there (the socket knows the caller by its
uid). Which address a client picks when none is given: JOBD_SOCKET; else a default
socket that is there, unless a token is configured; else TCP, as before.
"""

from __future__ import annotations

import json
import shutil
import socket
import socketserver
import tempfile
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import anyio
import pytest
from click.testing import CliRunner

from jobd.cli.job_main import cli
from jobd.cli.plain_http import PlainClient
from jobd.discovery import local_socket
from jobd.wire import calls
from jobd.wire.client import AsyncClient, Client

ANSWER = {"user": "alice", "uid": 1001, "groups": [], "role": "user", "admin": False}


class _Broker(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    seen: list[dict[str, str]]


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.server.seen.append({"path": self.path, **dict(self.headers)})  # type: ignore[attr-defined]
        body = json.dumps({**ANSWER, "via": "socket", "label": "uid 1001"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args: Any) -> None:
        pass


@pytest.fixture
def broker() -> Iterator[tuple[Path, list[dict[str, str]]]]:
    where = Path(tempfile.mkdtemp(prefix="jobd-uds-"))  # short: sun_path holds 107 bytes
    path = where / "jobd.sock"
    server = _Broker(str(path), _Handler)
    server.seen = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield path, server.seen
    server.shutdown()
    server.server_close()
    shutil.rmtree(where, ignore_errors=True)


def test_the_cli_client_speaks_over_the_socket_and_sends_no_token(
    broker: tuple[Path, list[dict[str, str]]],
) -> None:
    path, seen = broker
    with PlainClient(f"unix://{path}", "a-token-it-must-not-send") as client:
        assert client.run(calls.whoami())["user"] == "alice"
        assert client.run(calls.whoami())["user"] == "alice"  # the connection kept alive
    assert [s["path"] for s in seen] == ["/whoami", "/whoami"]
    assert all("Authorization" not in s for s in seen)


def test_the_sdks_clients_speak_over_the_socket(
    broker: tuple[Path, list[dict[str, str]]],
) -> None:
    path, seen = broker
    with Client(f"unix://{path}", "a-token-it-must-not-send") as client:
        assert client.run(calls.whoami())["user"] == "alice"

    async def asynchronously() -> Any:
        async with AsyncClient(f"unix://{path}", None) as client:
            return await client.run(calls.whoami())

    assert anyio.run(asynchronously)["user"] == "alice"
    assert len(seen) == 2 and all("Authorization" not in s for s in seen)


def test_job_whoami_over_unix_url_and_socket(
    broker: tuple[Path, list[dict[str, str]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    path, _ = broker
    env = {"JOBD_CONFIG": "/nonexistent/config.yaml", "JOBD_TOKEN": "", "JOBD_URL": ""}
    said = CliRunner().invoke(cli, ["--server", f"unix://{path}", "whoami"], env=env)
    assert said.exit_code == 0, said.output
    assert "alice (uid 1001)" in said.output and "Unix socket" in said.output
    said = CliRunner().invoke(cli, ["whoami", "-o", "json"], env={**env, "JOBD_SOCKET": str(path)})
    assert said.exit_code == 0, said.output
    assert json.loads(said.output)["user"] == "alice"
    refused = CliRunner().invoke(cli, ["--server", "unix://relative/path", "whoami"], env=env)
    assert refused.exit_code == 2 and "unix:///PATH" in refused.output


def test_which_socket_a_client_picks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runtime = Path(tempfile.mkdtemp(prefix="jobd-run-"))
    try:
        monkeypatch.delenv("JOBD_SOCKET", raising=False)
        monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
        root_socket = Path("/run/jobd/jobd.sock")
        if root_socket.is_socket():  # (the test run holds the path with a plain file)
            pytest.skip(f"a broker's socket is at {root_socket}: the default would be it")
        assert local_socket(token_configured=False) is None  # none there: TCP, as before
        with socket.socket(socket.AF_UNIX) as listening:
            listening.bind(str(runtime / "jobd.sock"))
            assert local_socket(token_configured=False) == f"unix://{runtime}/jobd.sock"
            assert local_socket(token_configured=True) is None  # a token says: over TCP
            monkeypatch.setenv("JOBD_SOCKET", "/elsewhere/jobd.sock")
            assert local_socket(token_configured=True) == "unix:///elsewhere/jobd.sock"
            monkeypatch.setenv("JOBD_SOCKET", "none")
            assert local_socket(token_configured=False) is None
    finally:
        shutil.rmtree(runtime, ignore_errors=True)
