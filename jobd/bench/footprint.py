"""`footprint`: the memory a worker costs its host, from /proc, at three moments.

A real `jobd worker --slots 8` beside a real `jobd broker` (mode `split`, two processes as
on a host). The worker is measured with everything it keeps — the agent and all its
descendants: its idle serving shims, and (while a job runs) its shim and workload — each
process's RSS, PSS and USS (private pages) read from /proc/PID/smaps_rollup:

- `idle`: fresh, registered and idle for IDLE_S;
- `after_drain`: SETTLE_S after the last of n `true` jobs (through 8 slots) finished;
- `running`: the shim of a running job (its workload sleeps): its own RSS, PSS and USS.

RSS counts a page shared by several processes (the interpreter's library, mapped by every
shim) once in each, so a sum of RSS overstates what the host gives; PSS shares each page
among its users and sums to it. Both are reported. Linux only.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx

from jobd.bench.calls import PROJECT, create_job, job_doc, wait_event
from jobd.bench.context import BenchContext, Skipped
from jobd.bench.dispatch import DRAIN_SLOTS, wait_drained
from jobd.bench.stats import Result
from jobd.wire import routes

__all__ = ["Memory", "process_memory", "run_footprint", "tree_of"]

IDLE_TARGET_MIB = 30.0
AFTER_DRAIN_TARGET_MIB = 60.0
SHIM_TARGET_MIB = 8.0
_MIB = 1024.0


@dataclass(frozen=True)
class Memory:
    """One process's resident memory in KiB, as smaps_rollup says."""

    pid: int
    role: str
    rss: int
    pss: int
    uss: int  # private pages, clean and dirty: what its exit would give back

    def as_json(self) -> dict[str, Any]:
        return {
            "pid": self.pid,
            "role": self.role,
            "rss_mib": _mib(self.rss),
            "pss_mib": _mib(self.pss),
            "uss_mib": _mib(self.uss),
        }


def _mib(kib: int) -> float:
    return round(kib / _MIB, 1)


def process_memory(pid: int, role: str) -> Memory | None:
    """pid's RSS, PSS and USS; None once it is gone."""
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return None
    kib = {}
    for line in text.splitlines()[1:]:
        key, _, value = line.partition(":")
        kib[key] = int(value.split()[0])
    uss = kib["Private_Clean"] + kib["Private_Dirty"]
    return Memory(pid, role, kib["Rss"], kib["Pss"], uss)


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for entry in (e for e in Path("/proc").iterdir() if e.name.isdigit()):
        try:
            ppid = int((entry / "stat").read_text().rpartition(")")[2].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        kids.setdefault(ppid, []).append(int(entry.name))
    return kids


def _cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_text().split("\0")
    except OSError:
        return []


def tree_of(agent: int) -> dict[int, str]:
    """The agent and every live descendant, each with its role: agent, shim (serving,
    or a shim of its own), workload (a shim's child) or other."""
    kids, roles = _children(), {agent: "agent"}
    frontier = [agent]
    while frontier:
        parent = frontier.pop()
        for pid in kids.get(parent, []):
            roles[pid] = _role(pid, roles[parent])
            frontier.append(pid)
    return roles


def _role(pid: int, parent_role: str) -> str:
    if parent_role == "shim":
        return "workload"
    argv = " ".join(_cmdline(pid))
    if "jobd.worker.shim.process" in argv:
        return "shim"
    return "other"


def measure(agent: int) -> list[Memory]:
    found = (process_memory(pid, role) for pid, role in tree_of(agent).items())
    return [m for m in found if m is not None]


def _moment(processes: list[Memory], waited_s: float) -> dict[str, Any]:
    return {
        "waited_s": waited_s,
        "processes": len(processes),
        "rss_mib": _mib(sum(m.rss for m in processes)),
        "pss_mib": _mib(sum(m.pss for m in processes)),
        "uss_mib": _mib(sum(m.uss for m in processes)),
        "each": [m.as_json() for m in processes],
    }


async def _drain(ctx: BenchContext, http: httpx.AsyncClient, total: int) -> int:
    project = f"{PROJECT}-footprint-{int(time.time())}"
    docs = [job_doc(f"fp-{i}", project=project) for i in range(total)]
    await http.post(routes.APPLY.url(), json={"documents": docs}, timeout=600)
    if not await wait_drained(ctx, http, project, total):
        raise TimeoutError(f"{total} jobs did not drain within the time budget")
    return total


async def _running_shim(http: httpx.AsyncClient, agent: int) -> Memory:
    """The shim of a job whose workload sleeps, measured while it runs; the job is then
    cancelled."""
    job = await create_job(http, job_doc("fp-sleeper", command=["sleep", "60"]))
    try:
        await wait_event(http, job, "process_started")
        for _ in range(100):
            tree = tree_of(agent)
            parents = _parents_of_sleep(tree)
            if parents and (found := process_memory(parents[0], "shim")) is not None:
                return found
            await anyio.sleep(0.05)
        raise RuntimeError("the running job's shim was not found below the agent")
    finally:
        await http.post(routes.CANCEL_JOB.url(job_id=job))


def _parents_of_sleep(tree: dict[int, str]) -> list[int]:
    kids = _children()
    return [
        pid
        for pid, role in tree.items()
        if role == "shim" and any(_cmdline(k)[:1] == ["sleep"] for k in kids.get(pid, []))
    ]


async def run_footprint(ctx: BenchContext) -> Result:
    ctx.require_own_broker("it reads the worker's processes in /proc")
    if not Path("/proc/self/smaps_rollup").exists():
        raise Skipped("needs /proc/PID/smaps_rollup (Linux 4.14+)")
    idle_s, total = ctx.sized(3.0, 10.0, 10.0), ctx.sized(40, 200, 200)
    settle_s = ctx.sized(5.0, 15.0, 15.0)
    async with ctx.broker("footprint", mode="split", slots=DRAIN_SLOTS) as (http, broker):
        assert broker is not None and broker.worker_proc is not None
        agent = broker.worker_proc.pid
        ctx.progress.step(f"idle for {idle_s:.0f} s")
        await anyio.sleep(idle_s)
        idle = measure(agent)
        drained = await _drain(ctx, http, total)
        ctx.progress.step(f"drained {drained}; settling for {settle_s:.0f} s")
        await anyio.sleep(settle_s)
        after = measure(agent)
        shim = await _running_shim(http, agent)
    return _result(_moment(idle, idle_s), _moment(after, settle_s), shim, drained)


def _result(idle: dict[str, Any], after: dict[str, Any], shim: Memory, drained: int) -> Result:
    result = Result("footprint", n=drained, per_s=None)
    result.target = (
        f"RSS: idle <= {IDLE_TARGET_MIB:.0f}, after drain <= {AFTER_DRAIN_TARGET_MIB:.0f}, "
        f"running shim's own (USS) <= {SHIM_TARGET_MIB:.0f} MiB"
    )
    shim_mib = shim.as_json()
    met_each = {
        "idle": idle["rss_mib"] <= IDLE_TARGET_MIB,
        "after_drain": after["rss_mib"] <= AFTER_DRAIN_TARGET_MIB,
        "running_shim": shim_mib["uss_mib"] <= SHIM_TARGET_MIB,
    }
    result.met = all(met_each.values())
    result.extra = {"idle": idle, "after_drain": after, "running_shim": shim_mib}
    result.extra["met_each"] = met_each
    result.extra["load_avg"] = os.getloadavg()[0]
    result.notes = "`jobd worker --slots 8` and all it keeps: RSS / PSS summed over its processes"
    result.details = [
        _line("idle", idle),
        _line("after drain", after),
        f"running job's shim: RSS {shim_mib['rss_mib']}, PSS {shim_mib['pss_mib']}, "
        f"USS {shim_mib['uss_mib']} MiB",
    ]
    return result


def _line(name: str, moment: dict[str, Any]) -> str:
    each = ", ".join(f"{p['role']} {p['rss_mib']}/{p['pss_mib']}" for p in moment["each"])
    return (
        f"{name} ({moment['waited_s']:g} s): {moment['processes']} processes, "
        f"RSS {moment['rss_mib']} MiB, PSS {moment['pss_mib']} MiB ({each}; RSS/PSS)"
    )
