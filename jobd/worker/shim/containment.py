"""How a job's processes are held together, so that a stop reaches every one of them.

One strategy interface, chosen once per agent by choose_containment():

- ProcessGroup, what works everywhere: a pooled shim starts the workload as the leader of
  a session and process group of its own, signals the whole group, and, as a child
  subreaper, also finds and kills what left the group (setsid, a double fork).
- SystemdScope, where user scopes work: a shim of its own starts inside the job's
  systemd user scope, a cgroup that every descendant stays in even after setsid or a
  double fork, so nothing escapes it.

Either one ends what a shim killed with -9 left of its job (kill_remains): the group and
session of the workload, and the scope where there is one.

The next shapes (CPU pinning, a memory cap) are further implementations or fields of these,
never a name compared as a string. `name` is only what the worker reports at registration.

Standard library only.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
from typing import Protocol

from jobd.worker.shim.procfs import ProcessIdentity
from jobd.worker.shim.protocol import LaunchSpec, ShimRecord
from jobd.worker.shim.remains import kill_job_remains

__all__ = ["Containment", "ProcessGroup", "SystemdScope", "choose_containment"]

_DETECT_TIMEOUT_S = 3.0


class Containment(Protocol):
    """How a job is contained on this host."""

    @property
    def name(self) -> str:
        """What the worker reports at registration (its status.runner)."""
        ...

    def shim_command_prefix(self, spec: LaunchSpec) -> list[str] | None:
        """The command a shim of the job's own starts under (it then holds the job), or
        None: a shim from the agent's pool holds it."""
        ...

    def kill_remains(self, record: ShimRecord) -> list[ProcessIdentity]:
        """SIGKILL what is left of the job whose shim (recorded in record) died without
        recording its end; the processes of its group and session signalled."""
        ...


class ProcessGroup:
    """A pooled shim holds the job in a process group of its own (and as a subreaper)."""

    name = "procgroup"

    def shim_command_prefix(self, spec: LaunchSpec) -> list[str] | None:
        return None

    def kill_remains(self, record: ShimRecord) -> list[ProcessIdentity]:
        return [] if record.workload is None else kill_job_remains(record.workload)


class SystemdScope:
    """A shim of the job's own starts in the job's systemd user scope, which then holds the
    shim and every process of the job."""

    name = "systemd"

    def shim_command_prefix(self, spec: LaunchSpec) -> list[str] | None:
        unit = f"--unit={_scope_unit(spec.job_id, spec.attempt)}"
        return ["systemd-run", "--user", "--scope", unit, "--collect", "--quiet", "--"]

    def kill_remains(self, record: ShimRecord) -> list[ProcessIdentity]:
        # The scope first: it holds even what left the group and the session.
        if record.job_id is not None and record.attempt is not None:
            unit = f"{_scope_unit(record.job_id, record.attempt)}.scope"
            _run_quietly(["systemctl", "--user", "kill", "--signal=SIGKILL", unit])
        return [] if record.workload is None else kill_job_remains(record.workload)


def _scope_unit(job_id: int | None, attempt: int | None) -> str:
    return f"jobd-job-{job_id}-{attempt}"


def _run_quietly(argv: list[str]) -> bool:
    """Run argv with no input or output; True if it succeeded within the timeout."""
    try:
        done = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=_DETECT_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


@functools.cache
def _user_scopes_work() -> bool:
    if shutil.which("systemd-run") is None:
        return False
    return _run_quietly(["systemd-run", "--user", "--scope", "--quiet", "--", "true"])


def choose_containment() -> Containment:
    """The best containment this host supports: a systemd scope if user scopes work, else a
    process group. The probe is cached; the first call may block for up to a few seconds.
    """
    return SystemdScope() if _user_scopes_work() else ProcessGroup()
