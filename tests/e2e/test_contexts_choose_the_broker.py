"""Contexts through the real `job`, as kubeconfig's: a config file under a temporary
XDG_CONFIG_HOME names brokers and token files; `--context`, `use-context` and the precedence
flag > environment > context > default; and click's shell completion, run by a real bash."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.e2e.harness import BIN, Jobd

DEAD = "http://127.0.0.1:9"  # nothing listens on the discard port


@pytest.fixture
def user(jobd: Jobd, tmp_path: Path) -> dict[str, str]:
    """A user's environment: their own HOME and config dir, no JOBD_* at all, and a copy of
    the broker's admin token in a file of their own (mode 0600)."""
    env = {k: v for k, v in jobd.env.items() if not k.startswith("JOBD_")}
    env.update(HOME=str(tmp_path), XDG_CONFIG_HOME=str(tmp_path / "cfg"))
    env.pop("XDG_DATA_HOME", None)
    token = tmp_path / "lab.token"
    shutil.copyfile(jobd.root / "data" / "admin.token", token)
    token.chmod(0o600)
    return env


def _job(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "job"), *args], env=env, capture_output=True, text=True, timeout=60
    )


def _ok(env: dict[str, str], *args: str) -> str:
    done = _job(env, *args)
    assert done.returncode == 0, f"job {' '.join(args)}: {done.stderr}"
    return done.stdout


def test_a_context_names_the_broker_its_token_and_project(
    jobd: Jobd, user: dict[str, str], tmp_path: Path
) -> None:
    assert _job(user, "get").returncode == 1  # no context: the default broker, not there
    _ok(user, "config", "set-context", "lab", "--server", jobd.url)
    _ok(user, "config", "set-context", "lab", "--token-file", "~/lab.token", "-p", "vision")
    _ok(user, "config", "set-context", "dead", "--server", DEAD)
    config = tmp_path / "cfg" / "jobd" / "config.yaml"
    assert config.stat().st_mode & 0o777 == 0o600

    view = json.loads(_ok(user, "config", "view", "-o", "json"))
    assert view["current_context"] == "lab"  # the first one set
    assert view["contexts"]["lab"] == {
        "server": jobd.url,
        "token_file": str(tmp_path / "lab.token"),
        "project": "vision",
    }
    token = (tmp_path / "lab.token").read_text().strip()
    assert token not in _ok(user, "config", "view") + _ok(user, "config", "get-contexts")

    job_id = int(_ok(user, "submit", "--", "true"))  # the context's broker, token, project
    assert json.loads(_ok(user, "get", str(job_id), "-o", "json"))["metadata"]["project"] == (
        "vision"
    )
    listed = json.loads(_ok(user, "get", "-o", "json"))  # `get` defaults to it too
    assert listed and {d["metadata"]["project"] for d in listed} == {"vision"}
    other = json.loads(_ok(user, "submit", "-p", "default", "-o", "json", "--", "true"))
    assert other["metadata"]["project"] == "default"  # a flag beats the context

    _ok(user, "config", "use-context", "dead")
    current = [
        ln.split()[1]
        for ln in _ok(user, "config", "get-contexts").splitlines()[1:]
        if ln.startswith("*")
    ]
    assert current == ["dead"]
    assert DEAD in _job(user, "get").stderr
    assert _ok(user, "--context", "lab", "get", str(job_id))
    assert _ok({**user, "JOBD_CONTEXT": "lab"}, "get", str(job_id))
    # The environment beats the context; a flag beats the environment.
    assert DEAD in _job({**user, "JOBD_URL": DEAD}, "--context", "lab", "get").stderr
    assert _ok({**user, "JOBD_URL": DEAD}, "--context", "lab", "--server", jobd.url, "get")
    # A context's token goes to its own server only: to another, none is sent.
    _ok(user, "config", "set-context", "dead", "--token-file", "~/lab.token")
    refused = _job({**user, "JOBD_URL": jobd.url}, "get")
    assert refused.returncode == 1 and "token" in refused.stderr.lower()


def test_a_context_that_cannot_be_used_is_one_clear_line(
    jobd: Jobd, user: dict[str, str], tmp_path: Path
) -> None:
    _ok(user, "config", "set-context", "lab", "--server", jobd.url, "--token-file", "~/lab.token")
    unknown = _job(user, "--context", "nope", "get")
    assert unknown.returncode == 1
    assert unknown.stderr.strip().endswith("(contexts: lab)") and "'nope'" in unknown.stderr
    assert _job(user, "config", "use-context", "nope").returncode == 1

    (tmp_path / "lab.token").chmod(0o644)
    loose = _job(user, "get")
    assert loose.returncode == 1 and f"chmod 600 {tmp_path / 'lab.token'}" in loose.stderr

    config = tmp_path / "cfg" / "jobd" / "config.yaml"
    config.write_text("contexts:\n  lab: {server: gpu1:8765}\n")
    broken = _job(user, "get")
    assert broken.returncode == 1 and broken.stderr.count("\n") == 1
    assert "contexts.lab.server" in broken.stderr and "http://" in broken.stderr
    # What shows the file still runs (and says what is wrong); completion still prints.
    assert "contexts.lab.server" in _job(user, "config", "view").stderr
    assert _ok(user, "completion", "bash")


def test_shell_completion_runs_in_a_real_bash(jobd: Jobd, user: dict[str, str]) -> None:
    _ok(user, "config", "set-context", "lab", "--server", jobd.url)
    _ok(user, "config", "set-context", "local", "--server", jobd.url)
    env = {**user, "PATH": f"{BIN}{os.pathsep}{user.get('PATH', '')}"}
    script = (
        'eval "$(job completion bash)"\n'
        'complete_line() { COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); COMPREPLY=();'
        ' _job_completion job; echo "${COMPREPLY[*]}"; }\n'
        "complete_line job conf\n"
        "complete_line job config use-\n"
        "complete_line job --context l\n"
    )
    done = subprocess.run(
        ["bash", "-c", script], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["config", "use-context", "lab local"]
    for shell, marker in (("zsh", "#compdef job"), ("fish", "complete --no-files --command job")):
        assert marker in _ok(user, "completion", shell)
