"""One job's output on the broker's disk, capped: the head and the newest bytes.

Offsets are the job's own: byte N of everything the workload wrote, whatever was kept.
Of a job's output the first `cap // 2` bytes are kept in `<id>.log` (the whole output,
for any job that wrote less), and the newest `cap - cap // 2` in `<id>.tail`: a ring
whose byte at offset N sits at N modulo its size, behind a 16-byte header holding the
offset where the ring's bytes begin to count and where the output ends. What lies
between the head and the ring's oldest byte was dropped; a reader asking for it is told
how much (`Read.dropped`) and sent on to the oldest byte kept.

Appends are idempotent: bytes at an offset already held must be the bytes held (a chunk
sent again whose answer was lost), else `OutputConflict`; a chunk beyond the end leaves
a gap, counted as dropped. A write that fails (a full disk) raises StorageFull; the
worker sends the chunk again and it lands where it should, since every byte has one
place. The head and the ring are written before the header that counts them.
"""

from __future__ import annotations

import errno
import os
import struct
from dataclasses import dataclass
from pathlib import Path

from jobd.store.base import StorageFull

__all__ = ["OutputConflict", "OutputFile", "Read"]

_HEADER = struct.Struct("<QQ")  # ring_start, end
_SCAN_BYTES = 64 * 1024  # read backwards this much at a time, looking for line ends


class OutputConflict(Exception):
    """Bytes at an offset already written differ from what was written there."""


@dataclass(frozen=True)
class Read:
    data: bytes
    next_offset: int  # where the next read starts
    dropped: int = 0  # bytes skipped before `data` (the cap, or never sent)


@dataclass(frozen=True)
class _Layout:
    head: int  # bytes held in the head file: offsets [0, head)
    ring_start: int | None  # None: no ring yet, the head is all there is
    end: int  # the offset after the last byte written

    def ring_low(self, ring_size: int) -> int:
        """The oldest offset the ring still holds."""
        if self.ring_start is None:
            return self.end
        return max(self.ring_start, self.end - ring_size)


class OutputFile:
    def __init__(self, head_path: Path, cap: int) -> None:
        if cap < 2:
            raise ValueError(f"max log bytes must be at least 2, not {cap}")
        self.head_path = head_path
        self.ring_path = head_path.with_suffix(".tail")
        self.head_cap = cap // 2
        self.ring_size = cap - self.head_cap

    # -- reading ----------------------------------------------------------------------

    def end(self) -> int:
        return self._layout().end

    def read(self, offset: int, limit: int) -> Read:
        lay = self._layout()
        if offset < lay.head:
            with self.head_path.open("rb") as f:
                f.seek(offset)
                data = f.read(min(limit, lay.head - offset))
            return Read(data, offset + len(data))
        low = lay.ring_low(self.ring_size)
        if offset < low:
            return Read(b"", low, dropped=low - offset)
        if offset >= lay.end:
            return Read(b"", offset)
        upto = min(lay.end, offset + limit)
        return Read(self._ring_read(offset, upto), upto)

    def start_of_last_lines(self, lines: int) -> int:
        """The offset where the output's last `lines` lines begin (a final line without
        its newline counts); never before bytes that were dropped, which hold no lines."""
        end = self.end()
        if lines <= 0 or end == 0:
            return end
        # A final newline ends the last line: it starts none.
        wanted = lines + (1 if self.byte_before(end) == b"\n" else 0)
        upto = end
        while upto > 0:
            begin, block = self._held_before(max(0, upto - _SCAN_BYTES), upto)
            found = block.count(b"\n")
            if found >= wanted:
                at = len(block)
                for _ in range(wanted):
                    at = block.rindex(b"\n", 0, at)
                return begin + at + 1
            wanted -= found
            if begin > max(0, upto - _SCAN_BYTES):  # a drop: nothing older is held
                return begin
            upto = begin
        return 0

    def _held_before(self, start: int, upto: int) -> tuple[int, bytes]:
        """(begin, bytes): the held bytes that run without a gap up to `upto`, from `start`
        or from just after the last drop past it."""
        at, begin, parts = start, start, list[bytes]()
        while at < upto:
            found = self.read(at, upto - at)
            if found.dropped:
                at = begin = found.next_offset
                parts = []
                continue
            if not found.data:
                break
            parts.append(found.data)
            at = found.next_offset
        return begin, b"".join(parts)

    def byte_before(self, offset: int) -> bytes:
        """The byte at offset - 1 if it is held (for a reader placing a note on its line)."""
        if offset <= 0:
            return b""
        found = self.read(offset - 1, 1)
        return found.data if not found.dropped else b""

    # -- writing ----------------------------------------------------------------------

    def append(self, offset: int, data: bytes) -> int:
        """Write `data` at `offset`; returns the end of the output after it."""
        lay = self._layout()
        if offset < lay.end:
            self._check_agrees(lay, offset, data[: lay.end - offset])
            data, offset = data[lay.end - offset :], lay.end
        if not data:
            return lay.end
        if lay.ring_start is None and offset == lay.head and lay.head < self.head_cap:
            room = self.head_cap - lay.head
            self._head_append(lay.head, data[:room])
            data, offset = data[room:], offset + min(room, len(data))
            if not data:
                return offset
        keep_from = lay.ring_start if lay.ring_start is not None and offset == lay.end else offset
        return self._ring_append(keep_from, offset, data)

    def remove(self) -> None:
        self.head_path.unlink(missing_ok=True)
        self.ring_path.unlink(missing_ok=True)

    def _check_agrees(self, lay: _Layout, offset: int, data: bytes) -> None:
        """Bytes sent again must be the bytes held; dropped ones cannot be checked."""
        at = offset
        while at < offset + len(data):
            held = self.read(at, offset + len(data) - at)
            if held.dropped:
                at = held.next_offset
                continue
            if not held.data:
                break
            sent = data[at - offset : at - offset + len(held.data)]
            if held.data != sent:
                raise OutputConflict(
                    f"bytes {offset}..{offset + len(data)} were already written, differently"
                )
            at = held.next_offset

    def _head_append(self, size: int, data: bytes) -> None:
        try:
            with self.head_path.open("ab") as f:
                f.write(data)
        except OSError as exc:
            self._cut_back(size)  # a write cut short leaves no bytes behind
            raise _fault(self.head_path, exc) from exc

    def _cut_back(self, size: int) -> None:
        try:
            if self.head_path.exists() and self.head_path.stat().st_size > size:
                os.truncate(self.head_path, size)
        except OSError:
            pass  # the next append compares what is there with what it sends

    def _ring_append(self, keep_from: int, offset: int, data: bytes) -> int:
        end = offset + len(data)
        if len(data) > self.ring_size:  # only the newest bytes fit
            data, offset = data[-self.ring_size :], end - self.ring_size
        try:
            fd = os.open(self.ring_path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                if os.fstat(fd).st_size < _HEADER.size:  # new: count nothing until written
                    os.pwrite(fd, _HEADER.pack(keep_from, offset), 0)
                for at, piece in self._ring_pieces(offset, data):
                    os.pwrite(fd, piece, _HEADER.size + at)
                os.pwrite(fd, _HEADER.pack(keep_from, end), 0)
            finally:
                os.close(fd)
        except OSError as exc:
            raise _fault(self.ring_path, exc) from exc
        return end

    def _ring_pieces(self, offset: int, data: bytes) -> list[tuple[int, bytes]]:
        """(position in the ring, bytes) for `data` at `offset`: one piece, or two if it wraps."""
        at = offset % self.ring_size
        first = data[: self.ring_size - at]
        pieces = [(at, first)]
        if len(first) < len(data):
            pieces.append((0, data[len(first) :]))
        return pieces

    def _ring_read(self, start: int, upto: int) -> bytes:
        at = start % self.ring_size
        first = min(upto - start, self.ring_size - at)
        with self.ring_path.open("rb") as f:
            f.seek(_HEADER.size + at)
            data = f.read(first)
            if first < upto - start:
                f.seek(_HEADER.size)
                data += f.read(upto - start - first)
        return data

    def _layout(self) -> _Layout:
        try:
            head = self.head_path.stat().st_size
        except FileNotFoundError:
            head = 0
        try:
            with self.ring_path.open("rb") as f:
                header = f.read(_HEADER.size)
        except FileNotFoundError:
            header = b""
        if len(header) < _HEADER.size:  # no ring, or one whose first write failed
            return _Layout(head, None, head)
        ring_start, end = _HEADER.unpack(header)
        return _Layout(head, ring_start, end)


def _fault(path: Path, exc: OSError) -> Exception:
    """A full (or failing) log disk is a storage fault of its own: 507, saying where."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EROFS):
        return StorageFull(f"the job log at {path} could not be written: {exc.strerror}")
    return exc
