"""What the agent knows of a job's processes, whoever runs them.

The workload runs under its supervisor (jobd.worker.supervisor); a runner names how the
job is contained (a process group, or a systemd user scope) and is what the worker
registers with. ProcessIdentity names one process for good, so a recycled pid is never
taken for a job's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

__all__ = [
    "ProcessIdentity",
    "Runner",
    "read_proc_stat",
]


class Runner(Protocol):
    """How this host contains a job: `procgroup` or `systemd` (see supervision/launching)."""

    name: str


@dataclass(frozen=True)
class ProcessIdentity:
    """A pid plus its kernel start time, so that a recycled pid is not taken for ours."""

    pid: int
    start_time: int  # clock ticks after boot, field 22 of /proc/<pid>/stat

    @classmethod
    def of(cls, pid: int) -> ProcessIdentity | None:
        stat = read_proc_stat(pid)
        return None if stat is None else cls(pid, stat[1])

    def is_running(self) -> bool:
        stat = read_proc_stat(self.pid)
        # A zombie has finished; only its parent's bookkeeping is left.
        return stat is not None and stat[1] == self.start_time and stat[0] not in "ZX"


def read_proc_stat(pid: int) -> tuple[str, int] | None:
    """(state letter, start time) of a process, or None if there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # The command name may contain spaces and parentheses; it ends at the last ')'.
    fields = raw[raw.rindex(b")") + 2 :].split()
    return fields[0].decode(), int(fields[19])
