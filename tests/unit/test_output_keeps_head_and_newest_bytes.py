"""The broker's copy of a job's output under a cap: its head and newest bytes, by offset."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobd.broker.streams.outputfile import OutputConflict, OutputFile


def _read_all(out: OutputFile) -> tuple[bytes, int]:
    """Everything a reader gets from offset 0, and how many bytes it was told were dropped."""
    data, dropped, offset = b"", 0, 0
    while True:
        found = out.read(offset, 7)
        if not found.data and not found.dropped:
            return data, dropped
        data, dropped, offset = data + found.data, dropped + found.dropped, found.next_offset


def test_output_under_the_cap_is_kept_whole_in_one_file(tmp_path: Path) -> None:
    out = OutputFile(tmp_path / "1.log", cap=100)
    assert out.append(0, b"hello ") == 6
    assert out.append(6, b"world\n") == 12
    assert _read_all(out) == (b"hello world\n", 0)
    assert not out.ring_path.exists()


def test_a_flood_keeps_the_head_and_the_newest_bytes_and_counts_the_rest(tmp_path: Path) -> None:
    out = OutputFile(tmp_path / "1.log", cap=40)
    stream = bytes(range(256)) * 40  # 10 240 bytes, sent in uneven chunks
    offset = 0
    for size in [3, 50, 1, 999, 17, 4000, 5167, 3]:
        assert out.append(offset, stream[offset : offset + size]) == offset + size
        offset += size
    assert offset == len(stream)
    data, dropped = _read_all(out)
    assert data == stream[:20] + stream[-20:]
    assert dropped == len(stream) - 40
    assert (tmp_path / "1.log").stat().st_size == 20
    assert out.ring_path.stat().st_size <= 16 + 20


def test_a_chunk_sent_again_is_not_written_twice(tmp_path: Path) -> None:
    out = OutputFile(tmp_path / "1.log", cap=40)
    stream = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJ"
    out.append(0, stream[:30])
    assert out.append(10, stream[10:30]) == 30  # a retry whose answer was lost
    assert out.append(25, stream[25:46]) == 46  # overlapping: only the new bytes count
    assert _read_all(out) == (stream[:20] + stream[26:46], 6)


def test_different_bytes_at_an_offset_already_written_are_refused(tmp_path: Path) -> None:
    out = OutputFile(tmp_path / "1.log", cap=40)
    out.append(0, b"the real output\n")
    with pytest.raises(OutputConflict):
        out.append(0, b"an impostor's line\n")
    assert _read_all(out) == (b"the real output\n", 0)


def test_a_gap_in_offsets_is_counted_as_dropped(tmp_path: Path) -> None:
    out = OutputFile(tmp_path / "1.log", cap=40)
    out.append(0, b"head\n")
    out.append(105, b"newest\n")
    data, dropped = _read_all(out)
    assert data == b"head\nnewest\n" and dropped == 100


def test_a_reader_overtaken_by_the_ring_is_told_what_it_missed(tmp_path: Path) -> None:
    out = OutputFile(tmp_path / "1.log", cap=20)
    out.append(0, b"a" * 10 + b"b" * 10)  # head full, ring holds b's
    follower = out.read(15, 100)
    assert follower.data == b"b" * 5
    out.append(20, b"c" * 30)  # the ring now holds the last 10 c's
    late = out.read(follower.next_offset, 100)
    assert late.dropped == 20 and late.next_offset == 40
    assert out.read(late.next_offset, 100).data == b"c" * 10
