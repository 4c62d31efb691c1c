"""Runs a workload as the leader of its own process group (and session).

Works everywhere, without systemd. Signals go to the whole group with killpg, which
reaches every descendant except those that deliberately leave the group (setsid);
the systemd scope runner has no such gap.
"""

from __future__ import annotations

import contextlib
import os

from jobd.worker.runner.base import (
    AdoptedProcess,
    Handle,
    HandleBase,
    LaunchSpec,
    ProcessIdentity,
    SpawnedProcess,
    parse_state,
    spawn,
)

__all__ = [
    "ProcessGroupHandle",
    "ProcessGroupRunner",
]


class ProcessGroupHandle(HandleBase):
    @property
    def pgid(self) -> int:
        # start_new_session made the main process leader of a group named by its pid.
        return self.pid

    async def signal(self, sig: int) -> None:
        if self._group_is_ours():
            _killpg_quietly(self.pgid, sig)

    def state(self) -> dict[str, object]:
        return {
            "runner": ProcessGroupRunner.name,
            "unit_name": self.unit_name,
            "pid": self.pid,
            "pgid": self.pgid,
            "start_time": self._main.identity.start_time,
        }

    def _group_is_ours(self) -> bool:
        # The kernel keeps a pid reserved while a group of that id exists, so the group
        # can only be someone else's if a different process now holds the leader's pid.
        current = ProcessIdentity.of(self.pgid)
        return current is None or current == self._main.identity


def _killpg_quietly(pgid: int, sig: int) -> None:
    # Already gone, or only members we may not signal are left: nothing to do.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


class ProcessGroupRunner:
    name = "procgroup"

    async def start(self, spec: LaunchSpec) -> Handle:
        process = await spawn(spec.argv, spec.cwd, spec.env)
        return ProcessGroupHandle(
            SpawnedProcess(process), spec.unit_name, stdout=process.stdout, stderr=process.stderr
        )

    async def recover(self, state: dict[str, object]) -> Handle | None:
        """Re-attach to a job started by an earlier agent; None if it has finished.

        Leftovers of a finished job are killed, as wait() would have done.
        """
        unit_name, identity = parse_state(state, self.name)
        handle = ProcessGroupHandle(AdoptedProcess(identity), unit_name)
        if identity.is_running():
            return handle
        await handle.wait()
        return None
