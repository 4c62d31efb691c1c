"""A token pasted with a newline or spaces around it works; one no header can carry is
refused in a sentence that never shows it (issue 21).

The real `job` command, in a subprocess, against a small HTTP server that records the
Authorization header each request brings.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from jobd.wire.client import Client

JOB = Path(sys.executable).parent / "job"
TOKEN = "jobd_" + "A" * 43


class _Recorder(BaseHTTPRequestHandler):
    seen: list[str | None] = []

    def do_GET(self) -> None:
        self.seen.append(self.headers.get("Authorization"))
        body = json.dumps({"items": [], "revision": 0}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def broker() -> Iterator[tuple[str, list[str | None]]]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    _Recorder.seen = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", _Recorder.seen
    finally:
        server.shutdown()
        server.server_close()


def _job(server: str, tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("JOBD_")}
    clean |= {"JOBD_URL": server, "JOBD_CONFIG": str(tmp_path / "none.yaml"), **env}
    return subprocess.run([str(JOB), *args], env=clean, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("padded", [TOKEN + "\n", TOKEN + " ", " \t" + TOKEN + "\r\n"])
def test_jobd_token_with_whitespace_around_it_is_stripped(
    broker: tuple[str, list[str | None]], tmp_path: Path, padded: str
) -> None:
    server, seen = broker
    result = _job(server, tmp_path, "get", JOBD_TOKEN=padded)
    assert result.returncode == 0, result.stderr
    assert seen == [f"Bearer {TOKEN}"]


def test_a_token_flag_with_a_trailing_newline_is_stripped(
    broker: tuple[str, list[str | None]], tmp_path: Path
) -> None:
    server, seen = broker
    result = _job(server, tmp_path, "--token", TOKEN + "\n", "get")
    assert result.returncode == 0, result.stderr
    assert seen == [f"Bearer {TOKEN}"]


@pytest.mark.parametrize(
    "bad", [TOKEN[:20] + "\n" + TOKEN[20:], TOKEN[:20] + "é" + TOKEN[20:], TOKEN + "\tx"]
)
def test_a_token_no_header_can_carry_is_refused_without_showing_it(
    broker: tuple[str, list[str | None]], tmp_path: Path, bad: str
) -> None:
    server, seen = broker
    result = _job(server, tmp_path, "get", JOBD_TOKEN=bad)
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "token" in result.stderr and "character" in result.stderr
    assert TOKEN[:10] not in result.stderr and "lost the connection" not in result.stderr
    assert seen == []  # nothing was sent


def test_a_worker_token_of_a_file_with_a_bad_character_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text(TOKEN[:20] + "é" + TOKEN[20:] + "\n")
    path.chmod(0o600)
    result = subprocess.run(
        [
            str(JOB.parent / "jobd"),
            "worker",
            "--token-file",
            str(path),
            "--server",
            "http://127.0.0.1:9",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr and TOKEN[:10] not in result.stderr
    assert f"the token file {path}" in result.stderr


def test_the_client_strips_and_refuses_as_the_command_does() -> None:
    with Client("http://127.0.0.1:9", TOKEN + "\n") as client:
        assert client.headers["Authorization"] == f"Bearer {TOKEN}"
    with pytest.raises(ValueError, match="character") as refused:
        Client("http://127.0.0.1:9", "tök" + TOKEN)
    assert TOKEN[:10] not in str(refused.value)
