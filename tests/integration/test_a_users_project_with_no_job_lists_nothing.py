"""A user token's project with no job yet lists nothing, it is no mistake (issue 21).

`job get -p a` with a token made for project `a`, before `a` has a job or a declaration,
said "project 'a' does not exist": an admin made a token for it, so it is a project, of
the defaults, as its first job finds it. A project nobody declared, ran or made a token
for is still reported missing. Real `jobd broker`, `jobd token create` and `job`.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

BIN = Path(sys.executable).parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[tuple[str, dict[str, str]]]:
    url = f"http://127.0.0.1:{_free_port()}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBD_")}
    env |= {"JOBD_DATA_DIR": str(tmp_path / "data"), "JOBD_CONFIG": str(tmp_path / "c.yaml")}
    argv = [str(BIN / "jobd"), "broker", "--port", url.rsplit(":", 1)[1]]
    argv += ["--log-dir", str(tmp_path / "logs")]
    process = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert process.poll() is None and time.monotonic() < deadline, "no broker"
            time.sleep(0.1)
        yield url, env
    finally:
        process.terminate()
        process.wait(timeout=30)


def _run(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)


def test_a_user_tokens_empty_project_lists_nothing(broker: tuple[str, dict[str, str]]) -> None:
    url, env = broker
    made = _run(env, str(BIN / "jobd"), "token", "create", "--role", "user", "--project", "a")
    assert made.returncode == 0, made.stderr
    token = next(word for word in made.stdout.split() if word.startswith("jobd_"))
    user = env | {"JOBD_URL": url, "JOBD_TOKEN": token}
    listed = _run(user, str(BIN / "job"), "get", "-p", "a")
    assert listed.returncode == 0, listed.stderr
    assert "does not exist" not in listed.stderr and listed.stdout.strip() == ""
    as_json = _run(user, str(BIN / "job"), "get", "-p", "a", "-o", "json")
    assert as_json.returncode == 0 and as_json.stdout.strip() == "[]", as_json.stderr


def test_a_project_nobody_made_is_still_reported_missing(
    broker: tuple[str, dict[str, str]],
) -> None:
    url, env = broker
    admin = env | {"JOBD_URL": url}
    listed = _run(admin, str(BIN / "job"), "get", "-p", "nobody")
    assert listed.returncode == 1
    assert "project 'nobody' does not exist" in listed.stderr
