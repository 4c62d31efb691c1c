"""The agent's side of a job's limits: how this host enforces them, which cores a job gets.

Detected once at start (detect_enforcement): CPUs are pinned by affinity where the OS
has it; memory is capped by a cgroup the worker makes under its own (cgroup v2 where the
unified hierarchy has the memory controller and delegates it to us, else the v1 memory
controller), else by the shim watching the job's RSS (`--memory-enforcement rss` forces
that). The worker reports what it uses in its Worker resource (`spec.enforcement`).

Cores (CoreAllocator): a job naming `cpus: N` gets ceil(N) cores of the worker's own
(its affinity, less the first floor(--reserve-cpus) where the CPUs were detected), those
least held by the jobs running here; a fraction (0.5) shares one core, packed with other
fractions while they fit in it. A job naming no cpus is not pinned. The cores are held
until the attempt is over; a re-adopted job's are read back from its workload's affinity.

The shim applies them (jobd.worker.shim.limits); jobd.worker.hooks.limits is the hook
that puts them in the launch plan, with OMP_NUM_THREADS and MKL_NUM_THREADS.
"""

from __future__ import annotations

import contextlib
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

from jobd.worker.shim.limits import CGROUP_V1, CGROUP_V2, RSS_WATCH, Limits, own_cgroup

__all__ = [
    "MEMORY_CHOICES",
    "NO_ENFORCEMENT",
    "THREAD_VARIABLES",
    "CoreAllocator",
    "Enforcement",
    "NoCgroup",
    "detect_enforcement",
    "pinnable_cores",
    "remove_cgroup_parent",
    "sweep_cgroups",
    "thread_count",
]

# --memory-enforcement: auto (the best this host has), cgroup (refuse to start without
# one), rss (the shim watches, whatever the host has).
MEMORY_CHOICES = ("auto", "cgroup", "rss")
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
_PROBE = "probe"


class NoCgroup(Exception):
    """`--memory-enforcement cgroup` on a host where the worker may make none."""


@dataclass(frozen=True)
class Enforcement:
    """How this worker enforces a job's limits."""

    cpu: str  # "affinity" or "none"
    memory: str  # "cgroup-v2", "cgroup-v1" or "rss-watch"
    cgroup_root: str | None = None  # the hierarchy's mount point
    cgroup_parent: str | None = None  # where job cgroups are made, relative to it
    cores: tuple[int, ...] = ()  # what jobs are pinned to

    def limits(self, cores: list[int] | None, memory: int | None) -> Limits:
        return Limits(cores, memory, self.memory, self.cgroup_root, self.cgroup_parent)


# What a host with nothing detected enforces: memory watched, no core pinned.
NO_ENFORCEMENT = Enforcement("none", RSS_WATCH)


def pinnable_cores(declared_cpus: bool, reserve_cpus: float) -> tuple[int, ...]:
    """The cores jobs are pinned to: this process's, less the first floor(reserve) where
    the CPUs were detected (the host keeps those); all of them if that leaves none."""
    try:
        cores = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return ()
    kept = 0 if declared_cpus else int(reserve_cpus)
    return tuple(cores[kept:] or cores)


def detect_enforcement(worker: str, memory: str, cores: tuple[int, ...]) -> Enforcement:
    """What this host supports, as `--memory-enforcement` (MEMORY_CHOICES) allows.

    NoCgroup when `cgroup` was asked for and no cgroup can be made here."""
    cpu = "affinity" if cores and hasattr(os, "sched_setaffinity") else "none"
    if memory != "rss":
        for version in (CGROUP_V2, CGROUP_V1):
            place = _cgroup_place(version, f"jobd-{worker}")
            if place is not None:
                return Enforcement(cpu, version, *place, cores=cores)
        if memory == "cgroup":
            raise NoCgroup(
                "--memory-enforcement cgroup: this worker may make no memory cgroup "
                "(neither a cgroup v2 with the memory controller delegated nor a v1 memory "
                "hierarchy is writable)"
            )
    return Enforcement(cpu, RSS_WATCH, cores=cores)


def _mounts(version: str) -> list[tuple[str, str]]:
    """(mount point, root within the hierarchy) of each mount of the memory hierarchy
    (v1) or the unified one (v2), from /proc/self/mountinfo."""
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        head, _, tail = line.partition(" - ")
        fields, (fstype, _, options) = head.split(), [*tail.split(), "", "", ""][:3]
        if (version == CGROUP_V2 and fstype == "cgroup2") or (
            version == CGROUP_V1 and fstype == "cgroup" and "memory" in options.split(",")
        ):
            found.append((fields[4], fields[3]))
    return found


def _cgroup_place(version: str, name: str) -> tuple[str, str] | None:
    """(mount point, parent relative to it) where this worker can make job cgroups with a
    memory cap, checked by making one; None where it cannot."""
    own = own_cgroup(version)
    if own is None:
        return None
    for mount, root in _mounts(version):
        relative = own[len(root) :] if own.startswith(root) and root != "/" else own
        parent = f"{relative.rstrip('/')}/{name}"
        if _can_cap(version, Path(mount, relative.lstrip("/")), Path(mount, parent.lstrip("/"))):
            return mount, parent
    return None


def _can_cap(version: str, own: Path, parent: Path) -> bool:
    """Whether a job cgroup with a memory cap can be made under parent (made here; removed
    again when it cannot: a hierarchy without the memory controller keeps nothing of ours)."""
    probe, made = parent / _PROBE, not parent.exists()
    try:
        parent.mkdir(exist_ok=True)
        if version == CGROUP_V2:
            if "memory" not in (parent / "cgroup.controllers").read_text().split():
                (own / "cgroup.subtree_control").write_text("+memory")
            (parent / "cgroup.subtree_control").write_text("+memory")
        probe.mkdir(exist_ok=True)
        cap = "memory.max" if version == CGROUP_V2 else "memory.limit_in_bytes"
        (probe / cap).write_text(str(1 << 30))
        return True
    except OSError:
        with contextlib.suppress(OSError):
            probe.rmdir()
        if made:
            with contextlib.suppress(OSError):
                parent.rmdir()
        return False
    finally:
        with contextlib.suppress(OSError):
            probe.rmdir()


def remove_cgroup_parent(enforcement: Enforcement) -> None:
    """The worker's directory of job cgroups, when the agent leaves and no job is in it
    (one that runs on keeps it; a shim makes it again for the next job if it must)."""
    if enforcement.cgroup_root is not None and enforcement.cgroup_parent is not None:
        with contextlib.suppress(OSError):
            Path(enforcement.cgroup_root, enforcement.cgroup_parent.lstrip("/")).rmdir()


def sweep_cgroups(enforcement: Enforcement) -> None:
    """Remove the job cgroups an earlier agent's shims left empty (killed -9, say); one
    still holding a process stays."""
    if enforcement.cgroup_root is None or enforcement.cgroup_parent is None:
        return
    parent = Path(enforcement.cgroup_root, enforcement.cgroup_parent.lstrip("/"))
    with contextlib.suppress(OSError):
        for child in parent.iterdir():
            if child.is_dir():
                with contextlib.suppress(OSError):
                    child.rmdir()


def thread_count(cpus: float) -> int:
    """OMP_NUM_THREADS for a job of `cpus`: ceil, at least 1."""
    return max(1, math.ceil(cpus))


@dataclass
class CoreAllocator:
    """Which cores each running job here is pinned to, and the next job's."""

    cores: tuple[int, ...]
    held: dict[int, tuple[list[int], float]] = field(default_factory=dict)  # job -> cores, cpus

    def take(self, job_id: int, cpus: float) -> list[int]:
        """ceil(cpus) cores for the job, the least held first (a fraction packed onto a
        core other fractions share while it fits); held until release()."""
        self.held.pop(job_id, None)
        load = self._load()
        count = min(thread_count(cpus), len(self.cores))
        if cpus < 1:
            fits = [c for c in self.cores if load[c] > 0 and load[c] + cpus <= 1]
            if fits:
                chosen = [max(fits, key=lambda c: (load[c], -c))]
                self.held[job_id] = (chosen, cpus)
                return chosen
        chosen = sorted(sorted(self.cores, key=lambda c: (load[c], c))[:count])
        self.held[job_id] = (chosen, cpus)
        return chosen

    def hold(self, job_id: int, cores: list[int]) -> None:
        """A re-adopted job's cores, as its workload has them (a core each, in full)."""
        self.held[job_id] = (cores, float(len(cores)))

    def release(self, job_id: int) -> None:
        self.held.pop(job_id, None)

    def _load(self) -> dict[int, float]:
        load = dict.fromkeys(self.cores, 0.0)
        for cores, cpus in self.held.values():
            for core in cores:
                if core in load:
                    load[core] += cpus / len(cores)
        return load
