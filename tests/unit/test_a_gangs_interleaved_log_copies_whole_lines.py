"""broker/streams/interleaving.py on real files: whole lines only, each behind its rank;
a member's dropped bytes (its cap) become one line saying so; nothing copied twice, even
by a second Interleaving over the same files (a broker restarted)."""

from __future__ import annotations

from pathlib import Path

from jobd.broker.streams.interleaving import Interleaving, prefixed
from jobd.broker.streams.outputfile import OutputFile


def _files(tmp_path: Path, cap: int = 1 << 20) -> tuple[OutputFile, OutputFile, Interleaving]:
    merged = OutputFile(tmp_path / "7.log", 1 << 20)
    rank = OutputFile(tmp_path / "7.rank1.log", cap)
    return merged, rank, Interleaving(merged, tmp_path / "7.merged")


def _all(output: OutputFile) -> bytes:
    return output.read(0, 1 << 20).data


def test_prefixed_tags_every_line() -> None:
    assert prefixed(3, b"a\n\nb\n") == b"[rank 3] a\n[rank 3] \n[rank 3] b\n"


def test_only_whole_lines_are_copied_and_never_twice(tmp_path: Path) -> None:
    merged, rank, interleaving = _files(tmp_path)
    rank.append(0, b"one\ntw")
    assert interleaving.catch_up(1, rank) == len(b"[rank 1] one\n")
    assert interleaving.catch_up(1, rank) == 0
    rank.append(6, b"o\nthree")
    again = Interleaving(merged, tmp_path / "7.merged")  # what a restarted broker makes
    again.catch_up(1, rank)
    assert _all(merged) == b"[rank 1] one\n[rank 1] two\n"
    again.catch_up(1, rank, flush=True)
    assert _all(merged) == b"[rank 1] one\n[rank 1] two\n[rank 1] three\n"


def test_a_drop_in_a_members_output_is_a_line_of_its_own(tmp_path: Path) -> None:
    merged, rank, interleaving = _files(tmp_path, cap=64)
    lines = b"".join(b"line %03d\n" % i for i in range(40))  # 360 bytes, a cap of 64
    rank.append(0, lines)
    interleaving.catch_up(1, rank)
    shown = _all(merged).splitlines()
    assert shown[:3] == [b"[rank 1] line 000", b"[rank 1] line 001", b"[rank 1] line 002"]
    assert b"[rank 1] [jobd: 296 bytes dropped here]" in shown
    assert shown[-1] == b"[rank 1] line 039"
    assert all(line.startswith(b"[rank 1] ") for line in shown)
