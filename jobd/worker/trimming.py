"""The agent gives back what a burst of jobs made its heap grow by, once it is idle.

A drain leaves the agent's malloc arenas holding freed memory that the next jobs would
reuse; on a host that runs no job for a while it is only RSS held for nothing, and so is
what start-up allocated and let go (imports, registration: ~0.4 MiB). Once no job has run
here for IDLE_S (since the last job ended, or since the agent registered), the agent
collects its cycles and asks glibc to return the free pages at the top and inside its
arenas (`malloc_trim(0)`). Nothing is trimmed while jobs run, and a trim costs a few
milliseconds once per quiet spell. Where glibc is not the C library (musl), there is
nothing to call and nothing is done.
Next stage: none; the agent (agent.py) says when it went idle.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc
from collections.abc import Callable

import anyio

__all__ = ["IDLE_S", "IdleTrim", "trim"]

IDLE_S = 2.0


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"))
        trim: Callable[[int], int] = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    return trim


def trim() -> bool:
    """Collect, then hand free heap pages back to the system; False where it cannot."""
    gc.collect()
    malloc_trim = _malloc_trim()
    if malloc_trim is None:
        return False
    malloc_trim(0)
    return True


class IdleTrim:
    """Trims once the agent has been idle (no job here) for idle_s since its last job."""

    def __init__(self, busy: Callable[[], bool], idle_s: float = IDLE_S) -> None:
        self.busy, self.idle_s = busy, idle_s
        self._went_idle = anyio.Event()
        self.trims = 0

    def went_idle(self) -> None:
        """The last job here is over (its execution gone)."""
        self._went_idle.set()

    async def run(self) -> None:
        while True:
            await self._went_idle.wait()
            self._went_idle = anyio.Event()
            await anyio.sleep(self.idle_s)
            if not self.busy() and not self._went_idle.is_set():
                trim()
                self.trims += 1
