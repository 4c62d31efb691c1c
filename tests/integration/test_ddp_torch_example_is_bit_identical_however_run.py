"""examples/ddp_torch.py under real torchrun processes, as a gang's members run it: two
`torchrun --nproc-per-node 1` given the environment jobd gives two members (PET_NNODES,
PET_NODE_RANK, PET_MASTER_ADDR, PET_MASTER_PORT) end with the very weights of one
`torchrun --nproc-per-node 2`; SIGTERM to both members mid-run leaves a checkpoint and one
sentinel per member, and the two resumed from their own checkpoints end bit-identical too.

Runs where torch is installed (`make torch`, which .ci/run does); elsewhere it skips,
saying so, except under CI=true, where it fails (tests/conftest.py `require_torch`).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import require_torch
from tests.e2e.harness import BIN, REPO

SCRIPT = REPO / "examples" / "ddp_torch.py"
SENTINEL = b"jobd-checkpoint-complete"
STEPS = "300"


@pytest.fixture(scope="module", autouse=True)
def _torch() -> None:
    require_torch()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _member_env(ckpt: Path, rank: int, port: int, **extra: str) -> dict[str, str]:
    """What jobd gives member `rank` of a gang of 2 whose master is 127.0.0.1:port."""
    unset = ("RESUME_FROM", "LOCAL_RANK", "RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    env = {k: v for k, v in os.environ.items() if k not in unset and not k.startswith("PET_")}
    env.update(
        PYTHONPATH=str(REPO),
        JOBD_CHECKPOINT_DIR=str(ckpt),
        JOBD_CHECKPOINT_GRACE_S="20",
        TRAIN_STEPS=STEPS,
        PET_NNODES="2",
        PET_NODE_RANK=str(rank),
        PET_MASTER_ADDR="127.0.0.1",
        PET_MASTER_PORT=str(port),
        **extra,
    )
    return env


def _torchrun(env: dict[str, str], nproc: int = 1) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [str(BIN / "torchrun"), "--nproc-per-node", str(nproc), str(SCRIPT)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip


def _results(out: bytes) -> list[dict[str, Any]]:
    lines = [ln for ln in out.decode().splitlines() if ln.startswith("RESULT ")]
    return [json.loads(ln.removeprefix("RESULT ")) for ln in lines]


def _finish(procs: list[subprocess.Popen[bytes]]) -> list[bytes]:
    outs = []
    for proc in procs:
        out, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, err.decode()[-3000:]
        outs.append(out)
    return outs


def _gang(tmp: Path, name: str, **extra: str) -> list[subprocess.Popen[bytes]]:
    port = _free_port()
    return [_torchrun(_member_env(tmp / f"{name}{r}", r, port, **extra)) for r in (0, 1)]


@pytest.fixture(scope="module")
def one_node(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One host, two processes: the run the others must equal."""
    ckpt = tmp_path_factory.mktemp("one-node")
    env = _member_env(ckpt, 0, _free_port())
    for key in ("PET_NNODES", "PET_NODE_RANK"):
        env.pop(key)
    (out,) = _finish([_torchrun(env, nproc=2)])
    results = _results(out)
    assert len(results) == 2 and results[0] == results[1]
    assert results[0]["world_size"] == 2 and results[0]["steps"] == int(STEPS)
    return results[0]


def test_two_nodes_of_one_process_end_as_one_node_of_two(
    one_node: dict[str, Any], tmp_path: Path
) -> None:
    outs = _finish(_gang(tmp_path, "m"))
    assert [_results(out) for out in outs] == [[one_node], [one_node]]
    assert b"rank=1 world=2" in outs[1]


def test_a_gang_preempted_mid_run_resumes_bit_identical(
    one_node: dict[str, Any], tmp_path: Path
) -> None:
    members = _gang(tmp_path, "first", TRAIN_STEP_SLEEP="0.01", TRAIN_LOG_EVERY="20")
    assert members[0].stdout is not None
    for line in members[0].stdout:  # training is under way
        if line.startswith(b"step="):
            break
    for proc in members:  # a gang is preempted whole: every member at the same moment
        proc.send_signal(signal.SIGTERM)
    for rank, proc in enumerate(members):
        out, err = proc.communicate(timeout=60)  # torchrun itself exits 1 (SignalException)
        assert out.count(SENTINEL) == 1, err.decode()[-3000:]
        assert (tmp_path / f"first{rank}" / "latest.pt").is_file()
        assert not _results(out), "stopped before its end"
    port = _free_port()
    resumed = [
        _torchrun(
            _member_env(tmp_path / f"then{r}", r, port, RESUME_FROM=str(tmp_path / f"first{r}"))
        )
        for r in (0, 1)
    ]
    outs = _finish(resumed)
    started = int(outs[0].split(b"start step=")[1].split()[0])
    assert 0 < started < int(STEPS), "it went on from where it stopped"
    assert [_results(out) for out in outs] == [[one_node], [one_node]]
