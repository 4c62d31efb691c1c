"""A job's limits, enforced by its shim: the cores it is pinned to, the memory it may use.

The agent decides the limits (jobd.worker.limits: which cores, which cap, and how this
host caps memory) and sends them in the launch spec; the shim applies them around the
one spawn of the workload, so the workload has them from its first instruction:

- CPUs: the shim sets its own affinity to the job's cores, spawns (posix_spawn inherits
  it) and restores its own. Every process the job makes inherits it in turn.
- Memory, by a cgroup (v1 `memory.limit_in_bytes`, v2 `memory.max`): the shim makes the
  job's cgroup, moves itself in, spawns (a child starts in its parent's cgroup) and moves
  itself back, so the cgroup holds the job's processes and never the shim. The kernel
  ends what goes over (the OOM killer, inside that cgroup only); the shim reads the OOM
  count and the peak at the end and removes the cgroup.
- Memory, by watching (`rss-watch`, where no cgroup may be made): the shim sums the RSS
  of every process of the job (it is their subreaper, so all are its descendants) each
  WATCH_INTERVAL_S (walking the job's processes alone, by /proc's `children` files), and
  SIGKILLs the job once the sum is over the cap. An allocation
  faster than that interval can overshoot briefly; the peak said is the largest seen.

A job whose memory went over ends with `memory_exceeded` in status.json (the message,
with the peak), from which the agent reports MemoryLimitExceeded.

Standard library only.
"""

from __future__ import annotations

import contextlib
import os
import signal
from dataclasses import dataclass

from jobd.worker.shim.log import log_event
from jobd.worker.shim.procfs import descendants
from jobd.worker.shim.signals import signal_job

# typing.TYPE_CHECKING without importing typing, which would cost every shim 0.4 MiB.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Any

__all__ = [
    "CGROUP_V1",
    "CGROUP_V2",
    "MEMORY_WAYS",
    "RSS_WATCH",
    "WATCH_INTERVAL_S",
    "Enforcer",
    "Limits",
    "human_size",
    "own_cgroup",
]

CGROUP_V1 = "cgroup-v1"
CGROUP_V2 = "cgroup-v2"
RSS_WATCH = "rss-watch"
MEMORY_WAYS = (CGROUP_V2, CGROUP_V1, RSS_WATCH)
# How often a watched job's memory is summed (rss-watch only).
WATCH_INTERVAL_S = 0.2
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


@dataclass(frozen=True)
class Limits:
    """What a job may use: cores (None: not pinned) and memory in bytes (None: no cap),
    and how this host caps memory: the way, and for a cgroup its hierarchy's mount point
    and the directory, relative to it, the job's cgroup is made in."""

    cpus: list[int] | None = None
    memory: int | None = None
    memory_via: str = RSS_WATCH
    cgroup_root: str | None = None
    cgroup_parent: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "cpus": self.cpus,
            "memory": self.memory,
            "memory_via": self.memory_via,
            "cgroup_root": self.cgroup_root,
            "cgroup_parent": self.cgroup_parent,
        }

    @classmethod
    def from_dict(cls, data: object) -> Limits | None:
        """The limits in data (None: none); ValueError naming what no shim can apply."""
        if data is None:
            return None
        if not isinstance(data, dict):
            raise ValueError("spec: limits must be an object")
        cpus, memory, via = data.get("cpus"), data.get("memory"), data.get("memory_via")
        if cpus is not None and not (
            isinstance(cpus, list) and cpus and all(_count(c) for c in cpus)
        ):
            raise ValueError("spec: limits.cpus must be a non-empty list of core numbers")
        if memory is not None and not (_count(memory) and memory > 0):
            raise ValueError("spec: limits.memory must be a number of bytes > 0")
        if via not in MEMORY_WAYS:
            raise ValueError(f"spec: limits.memory_via must be one of {', '.join(MEMORY_WAYS)}")
        root, parent = data.get("cgroup_root"), data.get("cgroup_parent")
        if via != RSS_WATCH and not (isinstance(root, str) and isinstance(parent, str)):
            raise ValueError("spec: a cgroup's limits need cgroup_root and cgroup_parent")
        return cls(cpus, memory, via, root, parent)


def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def human_size(size: int) -> str:
    """Bytes as the sizes jobd reads them: 512MiB, 1.5GiB."""
    value, unit = float(size), "B"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            break
        value /= 1024
    return f"{value:.0f}{unit}" if value >= 100 or unit == "B" else f"{value:.3g}{unit}"


def own_cgroup(version: str) -> str | None:
    """This process's cgroup (relative to its hierarchy's mount) in the memory hierarchy
    (v1) or the unified one (v2), from /proc/self/cgroup; None where it says none."""
    try:
        with open("/proc/self/cgroup") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if (version == CGROUP_V2 and controllers == "") or (
            version == CGROUP_V1 and "memory" in controllers.split(",")
        ):
            return path
    return None


class Enforcer:
    """One job's limits, applied by its shim: around the spawn, while it runs, at its end."""

    def __init__(self, limits: Limits | None, name: str) -> None:
        self.limits = limits
        self.name = name  # of the job's cgroup: the state directory's (job-attempt)
        self.cgroup: str | None = None  # the job's cgroup directory, once made
        self.watching = limits is not None and limits.memory is not None
        self.peak = 0  # bytes, the largest sum seen (rss-watch)
        self.killed = False  # rss-watch killed the job for its memory

    @property
    def interval(self) -> float | None:
        """How soon the supervise loop must call watch() again (None: never)."""
        return WATCH_INTERVAL_S if self.watching else None

    @contextlib.contextmanager
    def spawning(self) -> Iterator[None]:
        """The shim under the job's limits while the workload is spawned, and as before
        after: what it spawns inherits them."""
        limits = self.limits
        if limits is None:
            yield
            return
        affinity = self._pin(limits.cpus)
        back = self._enter_cgroup(limits) if limits.memory is not None else None
        try:
            yield
        finally:
            if back is not None:
                _write(back, str(os.getpid()))
            if affinity is not None:
                os.sched_setaffinity(0, affinity)

    def _pin(self, cpus: list[int] | None) -> set[int] | None:
        if not cpus:
            return None
        before = os.sched_getaffinity(0)
        os.sched_setaffinity(0, cpus)
        return before

    def _enter_cgroup(self, limits: Limits) -> str | None:
        """Make the job's cgroup with its cap and move the shim in; the shim's own cgroup's
        procs file (to move back to), or None (watched instead) where that fails."""
        if limits.memory_via == RSS_WATCH or limits.memory is None:
            return None
        assert limits.cgroup_root is not None and limits.cgroup_parent is not None
        own = own_cgroup(limits.memory_via)
        path = os.path.join(limits.cgroup_root, limits.cgroup_parent.lstrip("/"), self.name)
        try:
            os.makedirs(path, mode=0o755, exist_ok=True)
            self.cgroup = path
            _cap(path, limits.memory_via, limits.memory)
            if own is None:
                raise OSError(f"no {limits.memory_via} cgroup in /proc/self/cgroup")
            _write(os.path.join(path, "cgroup.procs"), str(os.getpid()))
        except OSError as exc:
            log_event(f"memory cgroup {path} not set up ({exc}): the job's RSS is watched")
            self.remove_cgroup()
            return None
        self.watching = False
        return os.path.join(limits.cgroup_root, own.lstrip("/"), "cgroup.procs")

    def watch(self, pgid: int) -> None:
        """rss-watch: SIGKILL the whole job once its processes' RSS adds up to more than
        its memory."""
        if not self.watching or self.limits is None or self.limits.memory is None:
            return
        used = sum(_rss(pid) for pid in _job_processes())
        self.peak = max(self.peak, used)
        if used > self.limits.memory:
            self.watching, self.killed = False, True
            log_event(f"memory {used} over the limit {self.limits.memory}: SIGKILL")
            signal_job(pgid, signal.SIGKILL)

    def release(self) -> str | None:
        """Once every process of the job is gone: the message when its memory went over
        (None: it did not), and its cgroup removed."""
        limits = self.limits
        if limits is None or limits.memory is None:
            return None
        over, peak = self.killed, self.peak
        if self.cgroup is not None:
            over, peak = _cgroup_end(self.cgroup, limits.memory_via)
            self.remove_cgroup()
        if not over:
            return None
        said = f"peak {human_size(peak)}, " if peak else ""
        return f"the job used more than its memory ({said}limit {human_size(limits.memory)})"

    def remove_cgroup(self) -> None:
        if self.cgroup is not None:
            with contextlib.suppress(OSError):  # a process left in it: the agent retries
                os.rmdir(self.cgroup)
            self.cgroup = None


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def _cap(path: str, via: str, memory: int) -> None:
    """Set the cgroup's cap, and no swap beyond it where the controller says swap."""
    if via == CGROUP_V1:
        _write(os.path.join(path, "memory.limit_in_bytes"), str(memory))
        optional = [("memory.memsw.limit_in_bytes", str(memory))]
    else:
        _write(os.path.join(path, "memory.max"), str(memory))
        # One OOM ends the whole job, not one process of it.
        optional = [("memory.swap.max", "0"), ("memory.oom.group", "1")]
    for name, value in optional:
        with contextlib.suppress(OSError):
            _write(os.path.join(path, name), value)


def _cgroup_end(path: str, via: str) -> tuple[bool, int]:
    """(whether the kernel killed a process of the job for its memory, the peak use)."""
    if via == CGROUP_V1:
        counters, peak_file = "memory.oom_control", "memory.max_usage_in_bytes"
    else:
        counters, peak_file = "memory.events", "memory.peak"
    kills = 0
    for line in (_read(os.path.join(path, counters)) or "").splitlines():
        key, _, value = line.partition(" ")
        if key == "oom_kill" and value.strip().isdigit():
            kills = int(value)
    peak = (_read(os.path.join(path, peak_file)) or "0").strip()
    return kills > 0, int(peak) if peak.isdigit() else 0


def _job_processes() -> list[int]:
    """Every descendant of this shim (so every process of its job): from each task's
    `children` file where the kernel has them (a walk of the job alone), else from one
    walk of all /proc."""
    me = os.getpid()
    if not os.path.exists(f"/proc/{me}/task/{me}/children"):
        return [pid for pid, _ in descendants(me)]
    found, frontier = [], [me]
    while frontier:
        parent = frontier.pop()
        try:
            tasks = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue  # gone meanwhile
        for task in tasks:
            kids = [int(k) for k in (_read(f"/proc/{parent}/task/{task}/children") or "").split()]
            found.extend(kids)
            frontier.extend(kids)
    return found


def _rss(pid: int) -> int:
    """A process's resident memory in bytes (0: gone)."""
    statm = _read(f"/proc/{pid}/statm")
    fields = statm.split() if statm else []
    return int(fields[1]) * _PAGE if len(fields) > 1 else 0
