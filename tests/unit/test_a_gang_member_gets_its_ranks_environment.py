"""What the agent of each member of a multi-host job gives its workload (worker/gangs.py).

Each rank gets jobd's variables and the same facts as torchrun reads them (`PET_*`, its
argument parser's `env` action), `MASTER_ADDR`/`MASTER_PORT`, its own GPUs, and the
checkpoint `job resume` named for its rank; these override the job's own env. Rank 0
launches at once, the others once rank 0's port is known. A job of one node gets none.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

from jobd.worker.gangs import pick_master_port, ready_to_launch
from jobd.worker.jobview import JobView
from jobd.worker.settings import WorkerSettings, workload_env

GANG_NAMES = {
    "JOBD_NODE_RANK", "JOBD_NUM_NODES", "JOBD_NODE_ADDRS", "JOBD_MASTER_ADDR",
    "JOBD_MASTER_PORT", "PET_NNODES", "PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT",
    "MASTER_ADDR", "MASTER_PORT",
}  # fmt: skip


def _settings(name: str) -> WorkerSettings:
    return WorkerSettings(
        name=name,
        slots=1,
        gpus=[0, 1],
        checkpoint_root=Path("/ckpt"),
        default_grace_s=60,
        state_dir=Path("/tmp/state"),
        base_env={},
    )


def _gang(master_port: int | None = 29400, **env: str) -> JobView:
    members: list[dict[str, Any]] = [
        {"rank": 0, "worker": "a", "address": "10.0.0.1", "gpus": [0]},
        {"rank": 1, "worker": "b", "address": "10.0.0.2", "gpus": [1]},
        {"rank": 2, "worker": "c", "gpus": []},
    ]
    status = {"phase": "Scheduled", "worker": "a", "gpus": [0], "members": members}
    if master_port is not None:
        status["master_port"] = master_port
    spec = {"command": ["torchrun", "train.py"], "nodes": 3, "env": env}
    return JobView({"metadata": {"id": 5, "name": "g"}, "spec": spec, "status": status})


def test_each_rank_gets_its_rank_the_masters_address_and_port() -> None:
    job = _gang(MASTER_PORT="1", PET_NNODES="9")  # the job's own do not win
    env = workload_env(job, _settings("b"), Path("/ckpt/5"))
    assert {k: env[k] for k in GANG_NAMES} == {
        "JOBD_NODE_RANK": "1", "JOBD_NUM_NODES": "3",
        "JOBD_NODE_ADDRS": "10.0.0.1,10.0.0.2,c",  # a member of no address: its worker name
        "JOBD_MASTER_ADDR": "10.0.0.1", "JOBD_MASTER_PORT": "29400",
        "PET_NNODES": "3", "PET_NODE_RANK": "1", "PET_MASTER_ADDR": "10.0.0.1",
        "PET_MASTER_PORT": "29400", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29400",
    }  # fmt: skip
    assert env["CUDA_VISIBLE_DEVICES"] == "1"  # its own GPUs, not rank 0's
    assert workload_env(job, _settings("a"), Path("/ckpt/5"))["PET_NODE_RANK"] == "0"


def test_a_resumed_gang_gives_each_rank_its_own_checkpoint() -> None:
    job = _gang(
        RESUME_FROM="/ck/0/latest.pt",
        RESUME_FROM_RANK_0="/ck/0/latest.pt",
        RESUME_FROM_RANK_1="/ck/1/latest.pt",
    )
    assert workload_env(job, _settings("b"), Path("/x"))["RESUME_FROM"] == "/ck/1/latest.pt"
    assert workload_env(job, _settings("a"), Path("/x"))["RESUME_FROM"] == "/ck/0/latest.pt"
    assert workload_env(job, _settings("c"), Path("/x"))["RESUME_FROM"] == "/ck/0/latest.pt"


def test_a_job_of_one_node_gets_none_of_them() -> None:
    spec = {"command": ["true"]}
    job = JobView({"metadata": {"id": 6}, "spec": spec, "status": {"worker": "a", "gpus": [0]}})
    env = workload_env(job, _settings("a"), Path("/ckpt/6"))
    assert not GANG_NAMES & env.keys() and env["CUDA_VISIBLE_DEVICES"] == "0"
    assert job.member("a") is None and job.bound_here("a") and not job.bound_here("b")


def test_rank_0_launches_at_once_and_the_others_once_its_port_is_known() -> None:
    waiting = _gang(master_port=None)
    member = waiting.member("b")
    assert member is not None and not ready_to_launch(waiting, member)
    first = waiting.member("a")
    assert first is not None and ready_to_launch(waiting, first)
    known = _gang()
    member = known.member("b")
    assert member is not None and ready_to_launch(known, member)


def test_the_master_port_is_free_on_the_address_asked() -> None:
    port = pick_master_port("127.0.0.1")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))  # free: nothing holds it
    assert pick_master_port("no-such-host.invalid") > 0  # any address, then
