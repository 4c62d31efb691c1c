"""A multi-host job's output: each member's kept apart, and all of them interleaved by line.

Each rank's agent ships its member's output to `<id>.rank<r>.log` (an OutputFile with
offsets of its own, what `job logs ID --rank R` reads). After every append, the lines of
that rank not yet copied are copied to the job's own `<id>.log`, each prefixed
`[rank R] `: what `job logs ID` reads, by offset, with `-f`, `--tail` and `--since` working
as for any job, since it is an ordinary output file that the broker writes itself. Lines
come in the order their chunks arrived; a line is never cut by another rank's.

Only whole lines are copied. A line still being written (no newline yet) waits in its
rank's file until its end arrives, or until it is `MAX_PENDING` bytes long (a progress bar
redrawn with `\\r` never ends one), or until the job has ended (`flush`), when what is left
of it is copied with a newline of its own: at the commit that ends the job (joblogs.py, for
a gang whose output this broker has heard since it started), and for any chunk that
arrives after the end. How far each rank has been copied is kept in
`<id>.merged` (JSON, replaced whole), so a broker restart copies nothing twice and loses
nothing: a copy interrupted before that file is written is copied again (the one case of
a line seen twice). What a rank's file dropped (its cap) is one line saying so.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from jobd.broker.streams.outputfile import OutputFile

__all__ = ["MAX_PENDING", "Interleaving", "prefixed"]

MAX_PENDING = 64 * 1024  # a line without its end copied anyway, past this many bytes
_READ = 1 << 20


def prefixed(rank: int, lines: bytes) -> bytes:
    """Each line of `lines` (which ends with a newline) behind `[rank R] `."""
    tag = f"[rank {rank}] ".encode()
    return b"".join(tag + line for line in lines.splitlines(keepends=True))


class Interleaving:
    """Copies one gang's members' whole lines into its interleaved output."""

    def __init__(self, merged: OutputFile, state_path: Path) -> None:
        self.merged = merged
        self.state_path = state_path

    def catch_up(self, rank: int, source: OutputFile, flush: bool = False) -> int:
        """Copy `source`'s (rank `rank`'s) lines not yet copied; the bytes written."""
        copied = self._copied()
        start = copied.get(str(rank), 0)
        text, upto = _whole_lines(rank, source, start, flush)
        if upto == start:
            return 0
        if text:
            self.merged.append(self.merged.end(), text)
        copied[str(rank)] = upto
        self._save(copied)
        return len(text)

    def _copied(self) -> dict[str, int]:
        try:
            held = json.loads(self.state_path.read_text())
        except (OSError, ValueError):
            return {}
        return {str(k): int(v) for k, v in held.items()} if isinstance(held, dict) else {}

    def _save(self, copied: dict[str, int]) -> None:
        tmp = self.state_path.with_suffix(".merged.tmp")
        tmp.write_text(json.dumps(copied, sort_keys=True))
        os.replace(tmp, self.state_path)

    def remove(self) -> None:
        self.state_path.unlink(missing_ok=True)


def _whole_lines(rank: int, source: OutputFile, start: int, flush: bool) -> tuple[bytes, int]:
    """(prefixed text, offset copied up to) for `source`'s bytes from `start`."""
    out: list[bytes] = []
    carry, at, upto = b"", start, start
    end = source.end()
    while at < end:
        found = source.read(at, _READ)
        if found.dropped:  # a drop ends the line it cut, and says so on a line of its own
            if carry:
                out.append(prefixed(rank, carry + b"\n"))
                carry = b""
            note = f"[jobd: {found.dropped:,} bytes dropped here]\n".encode()
            out.append(prefixed(rank, note))
            at = upto = found.next_offset
            continue
        if not found.data:
            break
        data, at = carry + found.data, found.next_offset
        cut = data.rfind(b"\n") + 1
        if cut:
            out.append(prefixed(rank, data[:cut]))
        carry, upto = data[cut:], at - (len(data) - cut)
    if carry and (flush or len(carry) >= MAX_PENDING):
        out.append(prefixed(rank, carry + b"\n"))
        upto = at
    return b"".join(out), upto
