"""How `job` shows a multi-host job (a gang): its WORKER cell, its NODES, its members.

A gang's `status.worker` is rank 0's; the WORKER cell adds how many more hosts it holds
(`gpu1+1`: rank 0 on gpu1 and one more), as Slurm's NODELIST shortens a node range;
where a line names the hosts a job would free (`job preempt-blockers`), every one is named.
`job describe` and `job get ID -o wide` list the members, one row per rank. A job of one
node has no members and shows as it always did. Plain dicts in, strings out: no pydantic.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jobd.cli.tables import PlainTable

__all__ = ["MEMBER_HEADERS", "members_table", "nodes_text", "worker_text", "workers_text"]

Document = Mapping[str, Any]
MEMBER_HEADERS = ("RANK", "WORKER", "ADDRESS", "PHASE", "EXIT", "GPUS")


def worker_text(status: Document) -> str:
    """The job's worker, `-` for none; of a gang, rank 0's and `+N` for the N others."""
    worker = str(status.get("worker") or "-")
    others = len(status.get("members") or []) - 1
    return f"{worker}+{others}" if others > 0 and worker != "-" else worker


def workers_text(status: Document) -> str:
    """Every worker the job holds, rank 0's first (`gpu1, gpu2`); `?` for none."""
    members = sorted(status.get("members") or [], key=lambda m: int(m.get("rank", 0)))
    workers = [str(m.get("worker") or "?") for m in members]
    return ", ".join(workers) if workers else str(status.get("worker") or "?")


def nodes_text(job: Document) -> str:
    """How many hosts the job runs on (spec.nodes): 1 for a job of one node."""
    return str((job.get("spec") or {}).get("nodes") or 1)


def members_table(status: Document) -> PlainTable | None:
    """RANK WORKER ADDRESS PHASE EXIT GPUS, one row per member; None for a job of one node."""
    members = status.get("members") or []
    if not members:
        return None
    table = PlainTable(*MEMBER_HEADERS)
    for member in sorted(members, key=lambda m: int(m.get("rank", 0))):
        table.add_row(
            str(member.get("rank", "?")),
            str(member.get("worker") or "-"),
            str(member.get("address") or "-"),
            str(member.get("phase") or "-"),
            _member_exit(member),
            ",".join(str(g) for g in member.get("gpus") or []) or "-",
        )
    return table


def _member_exit(member: Document) -> str:
    """`0`, `sig 9`, or `-` while it runs; with the reason it failed, if it says one."""
    if member.get("exit_signal") is not None:
        shown = f"sig {member['exit_signal']}"
    elif member.get("exit_code") is not None:
        shown = str(member["exit_code"])
    else:
        return "-"
    reason = member.get("reason")
    return f"{shown} ({reason})" if reason else shown
