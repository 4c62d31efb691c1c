"""`jobd broker` and `jobd dev` on a non-loopback address refuse a short admin token, as a
user meets it: one sentence, exit 2, nothing opened, nothing bound, nothing sent. On
loopback a short token still starts. A worker refuses a token file others may read."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from tests.e2e.harness import BIN


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env(root: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JOBD_", "XDG_DATA_HOME"))}
    env.update(JOBD_DATA_DIR=str(root / "data"), JOBD_LOG_DIR=str(root / "logs"), **extra)
    return env


def _jobd(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "jobd"), *args], env=env, capture_output=True, text=True, timeout=30
    )


def _nothing_listens(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


@pytest.mark.parametrize(
    ("program", "host", "token"),
    [
        ("broker", "0.0.0.0", "a"),
        ("broker", "::", "password"),
        ("broker", "192.0.2.7", "x" * 31),
        ("dev", "0.0.0.0", "password"),
    ],
)
def test_a_short_token_beyond_loopback_is_refused_before_anything_starts(
    tmp_path: Path, program: str, host: str, token: str
) -> None:
    port = _free_port()
    env = _env(tmp_path, JOBD_TOKEN=token)
    started = time.monotonic()
    result = _jobd(env, program, "--host", host, "--port", str(port))
    assert result.returncode == 2, result.stderr
    [line] = result.stderr.splitlines()
    assert f"refusing to listen on {host}" in line and f"{len(token)} characters" in line
    assert "at least 32" in line and "jobd token create" in line
    assert result.stdout == "" and time.monotonic() - started < 10
    assert _nothing_listens(port)
    assert not (tmp_path / "data").exists() and not (tmp_path / "logs").exists()


def test_a_short_admin_token_file_is_refused_too(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "admin.token").write_text("short\n")
    port = _free_port()
    result = _jobd(_env(tmp_path), "broker", "--host", "0.0.0.0", "--port", str(port))
    assert result.returncode == 2 and "5 characters" in result.stderr
    assert _nothing_listens(port) and not (tmp_path / "data" / "jobd.db").exists()


def test_loopback_stays_permissive(tmp_path: Path) -> None:
    port = _free_port()
    process = subprocess.Popen(
        [str(BIN / "jobd"), "broker", "--host", "127.0.0.1", "--port", str(port)],
        env=_env(tmp_path, JOBD_TOKEN="a"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            assert process.poll() is None and time.monotonic() < deadline
            try:
                answer = httpx.get(
                    f"http://127.0.0.1:{port}/jobs", headers={"Authorization": "Bearer a"}
                )
                break
            except httpx.TransportError:
                time.sleep(0.05)
        assert answer.status_code == 200
    finally:
        process.terminate()
        process.wait(10)


@pytest.mark.parametrize(("mode", "said"), [(0o644, "chmod 600"), (0o640, "chmod 600")])
def test_a_worker_refuses_a_token_file_others_may_read(
    tmp_path: Path, mode: int, said: str
) -> None:
    path = tmp_path / "token"
    path.write_text("jobd_secret\n")
    path.chmod(mode)
    env = _env(tmp_path, JOBD_TOKEN_FILE=str(path))
    result = _jobd(env, "worker", "--server", "http://127.0.0.1:9", "--gpus", "none")
    assert result.returncode == 2
    [line] = result.stderr.splitlines()
    assert line.startswith(f"jobd worker: the token file {path} may be read by others")
    assert said in line and "jobd_secret" not in result.stderr


def test_a_worker_refuses_a_missing_or_empty_token_file(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.write_text("")
    empty.chmod(0o600)
    for path, said in [(tmp_path / "absent", "cannot read"), (empty, "is empty")]:
        args = ["worker", "--server", "http://127.0.0.1:9", "--token-file", str(path)]
        result = _jobd(_env(tmp_path), *args)
        assert result.returncode == 2 and said in result.stderr, result.stderr


@pytest.mark.skipif(os.getuid() != 0, reason="giving a file to another user needs root")
def test_a_token_file_of_another_user_is_refused(tmp_path: Path) -> None:
    from jobd.cli.credentials import TokenFileError, read_token_file

    path = tmp_path / "token"
    path.write_text("jobd_secret\n")
    path.chmod(0o600)
    os.chown(path, 4321, 4321)
    with pytest.raises(TokenFileError, match="belongs to uid 4321"):
        read_token_file(path)
