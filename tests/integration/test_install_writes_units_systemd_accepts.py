"""`jobd broker install` and `jobd worker install` (the real program) write systemd units
that `systemd-analyze verify` accepts without a word, system and user ones; each setting
given becomes the Environment= line the daemon reads back as the same value; the worker's
unit stops the agent alone (KillMode=process); no secret is ever written."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from jobd.daemon.settings import AgentConnection, OutputOptions, WorkerOptions, options

JOBD = str(Path(sys.executable).parent / "jobd")
TOKEN = "s3cret-token-value-that-must-never-be-in-a-unit"


def _jobd(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBD_")}
    return subprocess.run(
        [JOBD, *args], capture_output=True, text=True, timeout=30, env=env, cwd=cwd
    )


def _verify(tmp_path: Path, unit: Path, *, user: bool = False) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        reason = "systemd-analyze is not installed (Debian: apt-get install systemd)"
        if os.environ.get("CI", "").lower() in {"true", "1"}:
            pytest.fail(f"CI=true and {reason}", pytrace=False)
        pytest.skip(reason)
    runtime = tmp_path / "runtime"  # a user manager's, which --user verify looks up
    runtime.mkdir(mode=0o700, exist_ok=True)
    env = {**os.environ, "XDG_RUNTIME_DIR": str(runtime)}
    args = [analyze, *(["--user"] if user else []), "verify", str(unit)]
    checked = subprocess.run(args, capture_output=True, text=True, timeout=60, env=env)
    # verify exits 0 on many faults (an unknown KillMode is only warned of): silence it is.
    assert checked.returncode == 0 and not checked.stderr.strip(), checked.stderr


def _lines(unit: Path, key: str) -> list[str]:
    return [
        line.split("=", 1)[1]
        for line in unit.read_text().splitlines()
        if line.startswith(f"{key}=")
    ]


def test_a_system_broker_unit_verifies_with_its_settings(tmp_path: Path) -> None:
    done = _jobd(
        "broker", "install", "--output", str(tmp_path), "--host", "0.0.0.0", "--port", "9000",
        "--data-dir", "state", "--finished-job-ttl", "30d", "--run-as", "jobd",
        cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    unit = tmp_path / "jobd-broker.service"
    assert f"wrote {unit}" in done.stderr
    assert "systemctl daemon-reload && systemctl enable --now jobd-broker" in done.stderr
    _verify(tmp_path, unit)
    assert _lines(unit, "ExecStart") == [f"{JOBD} broker"]
    assert _lines(unit, "Environment") == [
        "JOBD_HOST=0.0.0.0",
        "JOBD_PORT=9000",
        f"JOBD_DATA_DIR={tmp_path / 'state'}",  # a service starts in /: made absolute
        "JOBD_FINISHED_JOB_TTL_S=2592000",
    ]
    assert _lines(unit, "User") == ["jobd"] and _lines(unit, "Restart") == ["on-failure"]
    assert _lines(unit, "WantedBy") == ["multi-user.target"]


def test_a_user_worker_unit_verifies_and_stops_the_agent_alone(tmp_path: Path) -> None:
    token_file = tmp_path / "worker.token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o600)
    done = _jobd(
        "worker", "install", "--user", "--output", str(tmp_path),
        "--server", "http://broker.lab:8765", "--token-file", str(token_file),
        "--gpus", "0:24GiB,1:80GiB", "--name", "GPU-Box.lab", "--checkpoint-root", "/data/a b%",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "systemctl --user daemon-reload && systemctl --user enable --now jobd-worker" in (
        done.stderr
    )
    unit = tmp_path / "jobd-worker.service"
    _verify(tmp_path, unit, user=True)
    text = unit.read_text()
    assert TOKEN not in text and "JOBD_TOKEN=" not in text
    assert _lines(unit, "KillMode") == ["process"] and _lines(unit, "Restart") == ["on-failure"]
    assert _lines(unit, "WantedBy") == ["default.target"]
    assert _lines(unit, "Environment") == [
        "JOBD_URL=http://broker.lab:8765",
        f"JOBD_TOKEN_FILE={token_file}",
        "JOBD_WORKER_NAME=gpu-box.lab",
        "JOBD_WORKER_GPUS=0:24GiB,1:80GiB",
        '"JOBD_WORKER_CHECKPOINT_ROOT=/data/a b%%"',  # quoted; % kept from specifiers
    ]
    assert oct(unit.stat().st_mode & 0o777) == "0o644"


def test_each_line_reads_back_as_the_value_given(tmp_path: Path) -> None:
    given = [
        "--server", "http://b:1", "--token-file", "/etc/jobd/t", "--name", "w7",
        "--slots", "3", "--gpus", "0,2:40GiB", "--default-grace", "12.5",
        "--remove-checkpoints-after-days", "7", "--lease", "30", "--keep-job-files",
        "--max-log-bytes", "65536", "--group-readable",
    ]  # fmt: skip
    done = _jobd("worker", "install", "--dry-run", *given)
    assert done.returncode == 0, done.stderr
    env = dict(
        line.removeprefix("Environment=").split("=", 1)
        for line in done.stdout.splitlines()
        if line.startswith("Environment=")
    )
    assert len(env) == 11
    assert _parsed([], env) == _parsed(given, {}), "the unit's environment is the flags"


def _parsed(args: list[str], env: dict[str, str]) -> dict[str, Any]:
    """What `jobd worker`'s own options make of these flags and this environment."""
    seen: dict[str, Any] = {}

    @click.command()
    @options(AgentConnection, WorkerOptions, OutputOptions)
    def probe(**values: Any) -> None:
        seen.update(values)

    result = CliRunner().invoke(probe, args, env=env, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return seen


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["broker", "install", "--dry-run", "--token", TOKEN], "--token would be written"),
        (["worker", "install", "--dry-run", "--token", TOKEN], "give --token-file"),
        (["broker", "install", "--dry-run", "--db", "postgresql://u:pw@h/d"], "holds a password"),
        (["broker", "--port", "1", "install", "--dry-run"], "give --port after `install`"),
        (["broker", "install", "--dry-run", "--port", "x"], "'x' is not a valid integer"),
        (["worker", "install", "--dry-run", "--gpus", "0,0"], "GPU 0 is listed twice"),
        (["worker", "install", "--user", "--run-as", "bob", "--dry-run"], "for system units"),
    ],
)
def test_secrets_and_bad_settings_are_refused_with_a_reason(args: list[str], said: str) -> None:
    done = _jobd(*args)
    assert done.returncode != 0 and said in done.stderr, done.stderr
    assert TOKEN not in done.stdout


def test_an_existing_different_unit_is_replaced_only_with_force(tmp_path: Path) -> None:
    first = _jobd("broker", "install", "--output", str(tmp_path), "--port", "9000")
    assert first.returncode == 0, first.stderr
    again = _jobd("broker", "install", "--output", str(tmp_path), "--port", "9001")
    assert again.returncode == 1 and "--force replaces it" in again.stderr
    forced = _jobd("broker", "install", "--output", str(tmp_path), "--port", "9001", "--force")
    assert forced.returncode == 0, forced.stderr
    assert "JOBD_PORT=9001" in (tmp_path / "jobd-broker.service").read_text()
