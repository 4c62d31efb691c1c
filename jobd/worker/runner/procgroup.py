"""The process-group runner: what works everywhere, without systemd.

The supervisor starts the workload as the leader of a session and process group of its
own, signals the whole group, and, as a child subreaper, also finds and kills what left
the group (setsid, a double fork).
"""

from __future__ import annotations

__all__ = ["ProcessGroupRunner"]


class ProcessGroupRunner:
    name = "procgroup"
