"""A shim's own events: one line each on its stderr, which is the shared `supervisors.log`.

Each line names the shim's pid and the job it serves; lines are appended whole, so the
shims sharing the log never interleave. Standard library only.
"""

from __future__ import annotations

import os

from jobd.worker.shim.protocol import utc_now

__all__ = ["log_event", "serving"]

_job_label = ""  # the state directory's name, once a shim serves one: the log is shared


def serving(job_label: str) -> None:
    """Name the job this process's next lines are about."""
    global _job_label
    _job_label = f" {job_label}"


def log_event(message: str) -> None:
    who = f"jobd-supervisor[{os.getpid()}]{_job_label}"
    try:
        os.write(2, f"{utc_now()} {who}: {message}\n".encode(errors="replace"))
    except OSError:
        pass
