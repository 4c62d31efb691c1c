"""What is left of a job whose shim died without recording its end: found, and SIGKILLed.

A shim killed with -9 (or by the OOM killer) cannot end its job; whoever notices its death
does, from supervisor.json. The workload leads a session and a process group whose id is
its pid, and the kernel does not give that id to a new process while any member of the
group or session lives. So once the recorded leader is known not to be replaced by a
stranger (same pid, another start time), every live process in that group or session is
the job's. Each is signalled through a pidfd opened and then checked, so a pid reused
between the look and the kill is never signalled.

What left both the group and the session (setsid and a double fork) is out of reach here
once the shim, its subreaper, is gone: only a systemd scope (shim/containment.py) holds it.

Standard library only.
"""

from __future__ import annotations

import contextlib
import os
import signal

from jobd.worker.shim.procfs import ProcessIdentity, proc_stat

__all__ = ["job_remains", "kill_job_remains"]


def job_remains(workload: ProcessIdentity) -> list[ProcessIdentity]:
    """Every live process of the workload's process group or session, the leader included."""
    leader = proc_stat(workload.pid)
    if leader is not None and int(leader[19]) != workload.start_time:
        return []  # the id is a stranger's now: nothing of the job can hold it
    found = []
    with contextlib.suppress(OSError):
        for entry in os.listdir("/proc"):
            member = _member(int(entry), workload) if entry.isdigit() else None
            if member is not None:
                found.append(member)
    return found


def _member(pid: int, workload: ProcessIdentity) -> ProcessIdentity | None:
    fields = proc_stat(pid)
    if fields is None or fields[0] in "ZX":  # gone, or a zombie: finished
        return None
    pgid, sid, started = int(fields[2]), int(fields[3]), int(fields[19])
    # A member cannot have started before the leader that made its group.
    if workload.pid not in (pgid, sid) or started < workload.start_time:
        return None
    return ProcessIdentity(pid, started)


def kill_job_remains(workload: ProcessIdentity) -> list[ProcessIdentity]:
    """SIGKILL every process job_remains() finds; those signalled."""
    return [member for member in job_remains(workload) if _sigkill(member)]


def _sigkill(identity: ProcessIdentity) -> bool:
    try:
        pidfd = os.pidfd_open(identity.pid)
    except OSError:
        return False  # gone already
    try:
        # Checked after opening: from here on the pidfd names this process, whatever its pid.
        if not identity.is_running():
            return False
        signal.pidfd_send_signal(pidfd, signal.SIGKILL)
    except ProcessLookupError:
        return False
    finally:
        os.close(pidfd)
    return True
