"""The systemd runner (a user scope per job), and picking the runner for this host.

A scope is a cgroup: every descendant stays in it even after setsid or a double
fork, so `systemctl kill` reaches all of them, which a process group cannot promise.
"""

from __future__ import annotations

import functools
import shutil
import subprocess

from jobd.worker.runner.base import Runner
from jobd.worker.runner.procgroup import ProcessGroupRunner

__all__ = [
    "SystemdScopeRunner",
    "detect_runner",
]

_DETECT_TIMEOUT_S = 3.0


class SystemdScopeRunner:
    """The supervisor starts inside the job's systemd user scope (jobd.worker.launching),
    so the scope holds the supervisor and every process of the job."""

    name = "systemd"


@functools.cache
def _user_scopes_work() -> bool:
    if shutil.which("systemd-run") is None:
        return False
    try:
        probe = subprocess.run(
            ["systemd-run", "--user", "--scope", "--quiet", "--", "true"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=_DETECT_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return probe.returncode == 0


def detect_runner() -> Runner:
    """A systemd scope runner if user scopes work on this host, else a process-group one.

    The probe result is cached; the first call may block for up to a few seconds.
    """
    return SystemdScopeRunner() if _user_scopes_work() else ProcessGroupRunner()
