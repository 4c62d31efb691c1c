"""How this host contains a job (process group or systemd scope), and what names a process.

Use detect_runner() to get the best runner this host supports.
"""

from jobd.worker.runner.base import ProcessIdentity, Runner
from jobd.worker.runner.procgroup import ProcessGroupRunner
from jobd.worker.runner.systemd import SystemdScopeRunner, detect_runner

__all__ = [
    "ProcessGroupRunner",
    "ProcessIdentity",
    "Runner",
    "SystemdScopeRunner",
    "detect_runner",
]
