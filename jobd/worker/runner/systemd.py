"""Runs a workload in its own systemd user scope, and picks the runner for this host.

A scope is a cgroup: every descendant stays in it even after setsid or a double
fork, so `systemctl kill` reaches all of them, which a process group cannot promise.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import signal
import subprocess

import anyio

from jobd.worker.runner.base import (
    AdoptedProcess,
    Handle,
    HandleBase,
    LaunchSpec,
    Runner,
    SpawnedProcess,
    parse_state,
    spawn,
)
from jobd.worker.runner.procgroup import ProcessGroupRunner

__all__ = [
    "SystemdScopeHandle",
    "SystemdScopeRunner",
    "detect_runner",
]

_SYSTEMCTL_TIMEOUT_S = 5.0
_DETECT_TIMEOUT_S = 3.0


class SystemdScopeHandle(HandleBase):
    async def signal(self, sig: int) -> None:
        delivered = await _systemctl_kill(self.unit_name, sig)
        # A bus hiccup must not leave a running workload unsignalled.
        if not delivered and self._main.exit_result() is None:
            _kill_quietly(self.pid, sig)

    def state(self) -> dict[str, object]:
        return {
            "runner": SystemdScopeRunner.name,
            "unit_name": self.unit_name,
            "pid": self.pid,
            "start_time": self._main.identity.start_time,
        }


async def _systemctl_kill(unit_name: str, sig: int) -> bool:
    """Signal every process of the scope; False if it failed (e.g. the scope is gone)."""
    argv = ["systemctl", "--user", "kill", f"--signal={_signal_name(sig)}", f"{unit_name}.scope"]
    with anyio.move_on_after(_SYSTEMCTL_TIMEOUT_S):
        done = await anyio.run_process(
            argv, check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        return done.returncode == 0
    return False


def _signal_name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return str(sig)  # e.g. real-time signals; systemd also takes numbers


def _kill_quietly(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


class SystemdScopeRunner:
    name = "systemd"

    async def start(self, spec: LaunchSpec) -> Handle:
        # systemd-run needs the agent's bus variables; `env -i` then gives the workload
        # exactly spec.env. Both exec in place, so the pid is the workload's.
        process = await spawn(_scope_argv(spec), spec.cwd, env=None)
        return SystemdScopeHandle(
            SpawnedProcess(process), spec.unit_name, stdout=process.stdout, stderr=process.stderr
        )

    async def recover(self, state: dict[str, object]) -> Handle | None:
        """Re-attach to a job started by an earlier agent; None if it has finished.

        Leftovers in the scope of a finished job are killed, as wait() would have done.
        """
        unit_name, identity = parse_state(state, self.name)
        handle = SystemdScopeHandle(AdoptedProcess(identity), unit_name)
        if identity.is_running():
            return handle
        await handle.wait()
        return None


def _scope_argv(spec: LaunchSpec) -> list[str]:
    if not spec.argv or "=" in spec.argv[0]:
        # env(1) would take such an argv[0] for a variable assignment.
        raise ValueError(f"unusable argv for a systemd scope: {spec.argv!r}")
    env_bin = shutil.which("env") or "/usr/bin/env"
    assignments = [f"{key}={value}" for key, value in spec.env.items()]
    return [
        *("systemd-run", "--user", "--scope", f"--unit={spec.unit_name}", "--collect", "--quiet"),
        *("--", env_bin, "-i", "--", *assignments, *spec.argv),
    ]


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
