"""When each part of a job's output reached the broker: what `job logs --since 10m` reads.

A job's output is bytes without times. Beside `<id>.log` the broker keeps `<id>.times`:
records of (offset, arrival time), one at most every `every_s` seconds while output flows
(16 bytes each: a job that prints for a month without a pause adds some 40 MB), and a
reader finds where "ten minutes ago" begins by a binary search of them, never a scan.

The time is the arrival at the broker, to within `every_s`: workers ship output every
tenth of a second while they run, so it is when the job wrote it, except for output an
agent ships late (after a restart), which counts from when it arrived.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

__all__ = ["ArrivalTimes"]

_RECORD = struct.Struct("<Qd")  # offset, seconds since the epoch


class ArrivalTimes:
    def __init__(self, path: Path, every_s: float = 1.0) -> None:
        self.path = path
        self.every_s = every_s

    def stamp(self, offset: int, at: float) -> None:
        """Output from `offset` on arrived at `at`; recorded unless the last record is recent."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            held = os.fstat(fd).st_size
            size = held // _RECORD.size * _RECORD.size
            if size != held:  # a record cut short (a full disk): dropped, so all stay aligned
                os.ftruncate(fd, size)
            if size:
                last = os.pread(fd, _RECORD.size, size - _RECORD.size)
                last_offset, last_at = _RECORD.unpack(last)
                if at - last_at < self.every_s or offset <= last_offset:
                    return
            os.write(fd, _RECORD.pack(offset, at))
        finally:
            os.close(fd)

    def offset_since(self, cutoff: float, end: int) -> int:
        """The offset of the first output that arrived at `cutoff` or later; `end` for none."""
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return end
        try:
            low, high = 0, os.fstat(fd).st_size // _RECORD.size
            found = end
            while low < high:  # the first record at or after the cutoff
                mid = (low + high) // 2
                offset, at = _RECORD.unpack(os.pread(fd, _RECORD.size, mid * _RECORD.size))
                if at < cutoff:
                    low = mid + 1
                else:
                    high, found = mid, int(offset)
            return found
        finally:
            os.close(fd)

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)
