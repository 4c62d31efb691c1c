"""Starts, watches, stops and re-attaches to job workloads (cf. Nomad task drivers).

Use detect_runner() to get the best runner this host supports.
"""

from jobd.worker.runner.base import ExitResult, Handle, LaunchSpec, Runner
from jobd.worker.runner.procgroup import ProcessGroupRunner
from jobd.worker.runner.systemd import SystemdScopeRunner, detect_runner

__all__ = [
    "ExitResult",
    "Handle",
    "LaunchSpec",
    "ProcessGroupRunner",
    "Runner",
    "SystemdScopeRunner",
    "detect_runner",
]
