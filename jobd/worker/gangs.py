"""This worker's member of a multi-host job (a gang): its rank, its environment, and the
free port rank 0 chooses for the others to reach it.

Every member of a gang runs the same command; what tells them apart is the environment
their agents set (docs/concepts.md, "Jobs across several hosts"): jobd's own names, and
the same facts as `torchrun` reads them (`PET_<OPTION>` for each of its options, as its
argument parser's `env` action says), so `torchrun --nproc-per-node 8 train.py` runs
unchanged, plus `MASTER_ADDR`/`MASTER_PORT` for scripts that call
`torch.distributed.init_process_group` themselves. A job of one node gets none of them.
"""

from __future__ import annotations

import contextlib
import socket

from jobd.api.vocabulary import RESUME_FROM_RANK
from jobd.worker.jobview import JobView, MemberView

__all__ = ["gang_env", "master_port_said", "pick_master_port", "ready_to_launch"]


def gang_env(job: JobView, member: MemberView) -> dict[str, str]:
    """The variables member `member` of `job` gets beside every job's (override spec.env)."""
    members = job.status.members
    addresses = [m.address or m.worker for m in members]
    master, port = addresses[0], str(job.status.master_port or "")
    rank, nodes = str(member.rank), str(len(members))
    env = {
        "JOBD_NODE_RANK": rank,
        "JOBD_NUM_NODES": nodes,
        "JOBD_NODE_ADDRS": ",".join(addresses),
        "JOBD_MASTER_ADDR": master,
        "JOBD_MASTER_PORT": port,
        "PET_NNODES": nodes,
        "PET_NODE_RANK": rank,
        "PET_MASTER_ADDR": master,
        "PET_MASTER_PORT": port,
        "MASTER_ADDR": master,
        "MASTER_PORT": port,
    }
    # A retry's checkpoint of this rank is newer than the one `job resume` named.
    resume_from = job.status.resume_from_ranks.get(rank) or job.spec.env.get(
        f"{RESUME_FROM_RANK}{rank}"
    )
    if resume_from:
        env["RESUME_FROM"] = resume_from
    return env


def ready_to_launch(job: JobView, member: MemberView) -> bool:
    """Whether this member may start: rank 0 at once (it chooses the port), the others
    once rank 0's port is known, so the master listens first."""
    return member.rank == 0 or job.status.master_port is not None


def master_port_said(rank: int | None, job: JobView | None) -> dict[str, int]:
    """What rank 0's `started` says of the port it chose (`master_port`); nothing for any
    other member, or a job of one node (rank None)."""
    if rank != 0 or job is None or job.status.master_port is None:
        return {}
    return {"master_port": job.status.master_port}


def pick_master_port(address: str | None) -> int:
    """A port free now on `address` (this host's advertised one), for rank 0's workload to
    listen on: bound on port 0, read, and closed. Any address when that one cannot be
    bound here (a name, or an address behind NAT)."""
    for host in (address or "", ""):
        with contextlib.suppress(OSError), socket.socket() as sock:
            sock.bind((host, 0))
            port: int = sock.getsockname()[1]
            return port
    raise OSError(f"no free port to bind on {address!r}")
