"""Spot the checkpoint-complete sentinel in a job's stdout as it streams past.

The worker reads the workload's output in arbitrary chunks, so the sentinel can straddle two
or more reads. The scanner keeps just enough of the previous bytes to recognise it anyway,
without buffering the stream. The worker decides when it is listening (only during the
grace window) and calls ``reset()`` when it starts, so older output cannot complete a match.
"""

from __future__ import annotations

from jobd.client import SENTINEL

__all__ = ["SENTINEL_BYTES", "SentinelScanner"]

SENTINEL_BYTES = SENTINEL.encode("ascii")


class SentinelScanner:
    """Byte-exact streaming detector for one fixed marker (by default the jobd sentinel)."""

    def __init__(self, sentinel: bytes = SENTINEL_BYTES) -> None:
        if not sentinel:
            raise ValueError("sentinel must not be empty")
        self._sentinel = sentinel
        # Any match that started in earlier chunks began within the last len-1 bytes.
        self._keep = len(sentinel) - 1
        self._carry = b""
        self._seen = False

    @property
    def seen(self) -> bool:
        """Whether the sentinel has been seen since this scanner was created."""
        return self._seen

    def feed(self, chunk: bytes) -> bool:
        """Scan the next chunk; True only on the call that completes the first sighting."""
        if self._seen:
            return False
        window = self._carry + chunk
        if self._sentinel in window:
            self._seen = True
            self._carry = b""
            return True
        self._carry = window[max(0, len(window) - self._keep) :] if self._keep else b""
        return False

    def reset(self) -> None:
        """Forget carried-over bytes so a match cannot start in output fed before now."""
        self._carry = b""
