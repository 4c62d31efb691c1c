"""What a shim asks of the kernel: signals as wake-ups, a child subreaper, and a signal that
reaches every process a job made. Standard library only, and its smallest parts: the
signal module's C half (its Python half imports enum) and ctypes's (one call, prctl).
"""

from __future__ import annotations

import os
import select

from jobd.worker.shim.log import log_event
from jobd.worker.shim.procfs import descendants

# typing.TYPE_CHECKING without importing typing, which would cost every shim 0.4 MiB.
TYPE_CHECKING = False
if TYPE_CHECKING:
    import signal
    from collections.abc import Callable
    from typing import Any
else:
    import _signal as signal

__all__ = [
    "SHRUGGED_SIGNALS",
    "STOP_SIGNALS",
    "Wakeups",
    "become_subreaper",
    "no_children_left",
    "signal_job",
    "signal_quietly",
]

STOP_SIGNALS = frozenset({signal.SIGTERM, signal.SIGUSR1})
# The agent's terminal going away must not end the job: noted, nothing more.
SHRUGGED_SIGNALS = frozenset({signal.SIGINT, signal.SIGHUP})
_PR_SET_CHILD_SUBREAPER = 36


def _ignore(*_: object) -> None:
    """A Python handler (not SIG_IGN, which a workload would inherit) that does nothing:
    the C-level handler has already written the signal's number to the wake-up pipe."""


class Wakeups:
    """Signals turned into bytes on a pipe, so one select() waits for all of them."""

    SIGNALS = (signal.SIGCHLD, *STOP_SIGNALS, *SHRUGGED_SIGNALS)

    def __init__(self) -> None:
        self._read_fd, write_fd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
        for sig in self.SIGNALS:
            signal.signal(sig, _ignore)

    def fileno(self) -> int:
        """Readable once a signal has arrived (for a select() over more than this)."""
        return self._read_fd

    def wait(self, timeout_s: float) -> set[int]:
        """The signals that arrived, waiting up to timeout_s for the first."""
        select.select([self._read_fd], [], [], max(0.0, timeout_s))
        return self.take()

    def take(self) -> set[int]:
        seen: set[int] = set()
        try:
            while chunk := os.read(self._read_fd, 512):
                seen.update(chunk)
        except BlockingIOError:
            pass
        return seen


def signal_quietly(send: Callable[[int, int], None], target: int, sig: int) -> None:
    try:
        send(target, sig)
    except (ProcessLookupError, PermissionError):
        pass


def signal_job(pgid: int, sig: int) -> None:
    """sig to the job's process group and to every descendant that left it.

    Being a subreaper, the shim is an ancestor of every process the job made, a
    double-forked daemon included. A group member is signalled once only: a workload must
    not see its SIGTERM handler run twice.
    """
    signal_quietly(os.killpg, pgid, sig)
    for pid, group in descendants(os.getpid()):
        if group != pgid:
            signal_quietly(os.kill, pid, sig)


def no_children_left() -> bool:
    try:
        os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True
    return False


def become_subreaper() -> None:
    """Orphans of the job are reparented to us, not to init, so they are found and reaped."""
    try:
        done = _prctl(_PR_SET_CHILD_SUBREAPER, 1) == 0
    except (OSError, AttributeError, ImportError):
        done = False
    if not done:
        log_event("cannot become a child subreaper; daemonized processes may escape")


def _prctl(option: int, value: int) -> int:
    """prctl(2) through ctypes's C half alone (ctypes itself is 0.4 MiB more of a shim):
    the classes ctypes.CDLL would make for it, made here."""
    import _ctypes  # once per shim, at its start

    c: Any = _ctypes
    c_int = type("c_int", (c._SimpleCData,), {"_type_": "i"})
    flags = c.FUNCFLAG_CDECL | c.FUNCFLAG_USE_ERRNO
    function = type("Function", (c.CFuncPtr,), {"_flags_": flags, "_restype_": c_int})
    program = type("Program", (), {"_handle": c.dlopen(None, os.RTLD_LOCAL)})()
    return int(function(("prctl", program))(option, value, 0, 0, 0))
