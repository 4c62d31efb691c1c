"""schemathesis against a real `jobd broker`: every check on, no 5xx, nothing off-schema.

The run reads the broker's own /openapi.json and sends what it generates from it
(valid and invalid requests, then stateful sequences through the links it infers), and
fails on any server error, any response whose status, content type or body the document
does not state, any valid request refused and any invalid one accepted. `make test`
runs 20 cases per operation with a fixed seed (reproducible, about a minute), and the
coverage phase's boundary cases for every route but the two that take manifests; `make soak`
runs every phase on every route, longer, with a fresh seed each time.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.fuzz.broker import BIN, TOKEN, Broker, running_broker

HERE = Path(__file__).parent
SEED = "20261203"


def _schemathesis(url: str, cwd: Path, *options: str) -> subprocess.CompletedProcess[str]:
    argv = [str(BIN / "schemathesis"), "run", f"{url}/openapi.json", "--checks", "all"]
    argv += ["-H", f"Authorization: Bearer {TOKEN}", "--generation-database", "none"]
    # One worker: hypothesis describes strategies with `ast.parse`, which CPython 3.11
    # breaks when two threads run it at once ("AST constructor recursion depth mismatch").
    argv += ["--workers", "1", "--no-color", *options]
    env = {**os.environ, "SCHEMATHESIS_HOOKS": "schemathesis_hooks", "PYTHONPATH": str(HERE)}
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def _seed(broker: Broker) -> None:
    """A worker, and a few jobs for the routes that list and watch them."""
    with broker.client() as http:
        assert http.put("/workers/w1", json={"spec": {"slots": 2}}).status_code == 200
        for i in range(3):
            created = http.post("/jobs", json={"spec": {"command": ["sleep", str(i)]}})
            assert created.status_code == 201, created.text


def _assert_clean(result: subprocess.CompletedProcess[str], root: Path) -> None:
    broker_log = (root / "broker.log").read_text()
    assert "Traceback" not in broker_log, broker_log[-4000:]
    found = result.stdout.partition("FAILURES")[2].partition("= WARNINGS")[0]
    assert result.returncode == 0, (found or result.stdout)[:20000] + result.stderr[-2000:]


# The coverage phase's boundary cases of the manifest bodies (a Job, Project or JobArray
# document, each field at its limits) take it minutes; `make soak` runs them.
_MANIFEST_BODIES = "^/(apply|arrays)$"


def test_a_bounded_run_finds_nothing(tmp_path: Path) -> None:
    with running_broker(tmp_path) as broker:
        _seed(broker)
        generated = ("--max-examples", "20", "--seed", SEED)
        runs = [
            _schemathesis(
                broker.url, tmp_path, *generated, "--phases", "examples,fuzzing,stateful"
            ),
            _schemathesis(
                broker.url,
                tmp_path,
                *generated,
                "--phases",
                "coverage",
                "--exclude-path-regex",
                _MANIFEST_BODIES,
            ),
        ]
    for result in runs:
        _assert_clean(result, tmp_path)


@pytest.mark.soak
def test_a_long_run_finds_nothing(tmp_path: Path) -> None:
    with running_broker(tmp_path) as broker:
        _seed(broker)
        result = _schemathesis(broker.url, tmp_path, "--max-examples", "400")
    _assert_clean(result, tmp_path)
