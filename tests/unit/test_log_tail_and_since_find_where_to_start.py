"""`job logs --tail N` and `--since S`: where in a job's held output a read starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobd.broker.streams.logtimes import ArrivalTimes
from jobd.broker.streams.outputfile import OutputFile


def _output(tmp_path: Path, data: bytes, cap: int = 1 << 20) -> OutputFile:
    output = OutputFile(tmp_path / "1.log", cap)
    output.append(0, data)
    return output


@pytest.mark.parametrize(
    ("data", "lines", "expected"),
    [
        (b"a\nb\nc\n", 1, b"c\n"),
        (b"a\nb\nc\n", 2, b"b\nc\n"),
        (b"a\nb\nc\n", 3, b"a\nb\nc\n"),
        (b"a\nb\nc\n", 9, b"a\nb\nc\n"),
        (b"a\nb\nc", 1, b"c"),  # a last line without its newline is a line
        (b"a\nb\nc", 2, b"b\nc"),
        (b"a\nb\n", 0, b""),
        (b"", 3, b""),
    ],
)
def test_tail_starts_at_the_last_lines(
    tmp_path: Path, data: bytes, lines: int, expected: bytes
) -> None:
    output = _output(tmp_path, data)

    start = output.start_of_last_lines(lines)

    assert data[start:] == expected


def test_tail_reads_back_over_many_blocks(tmp_path: Path) -> None:
    data = b"".join(f"line {i:06d} {'x' * 90}\n".encode() for i in range(3000))  # ~300 KB
    output = _output(tmp_path, data)

    start = output.start_of_last_lines(2000)

    assert data[start:].splitlines()[0].startswith(b"line 001000 ")
    assert len(data[start:].splitlines()) == 2000


def test_tail_never_reaches_back_past_dropped_bytes(tmp_path: Path) -> None:
    data = b"".join(f"{i}\n".encode() for i in range(10_000))
    output = _output(tmp_path, data, cap=4096)  # keeps the head and the newest 2 KB

    start = output.start_of_last_lines(100_000)
    read = output.read(start, 1 << 20)

    assert read.dropped == 0 and start > len(data) // 2
    assert read.data == data[start:]


def test_since_finds_the_first_output_that_arrived_after_the_cutoff(tmp_path: Path) -> None:
    times = ArrivalTimes(tmp_path / "1.times", every_s=1.0)
    for offset, at in [(0, 100.0), (10, 100.5), (20, 101.0), (30, 105.0), (40, 105.2)]:
        times.stamp(offset, at)

    assert times.offset_since(0.0, end=50) == 0
    assert times.offset_since(100.2, end=50) == 20  # 100.5 was not recorded: within 1 s
    assert times.offset_since(103.0, end=50) == 30
    assert times.offset_since(106.0, end=50) == 50  # nothing since: the end
    assert (tmp_path / "1.times").stat().st_size == 3 * 16


def test_since_without_a_record_is_the_end_and_a_cut_record_is_dropped(tmp_path: Path) -> None:
    times = ArrivalTimes(tmp_path / "1.times")
    assert times.offset_since(0.0, end=7) == 7

    times.stamp(0, 10.0)
    with (tmp_path / "1.times").open("ab") as f:
        f.write(b"\x01\x02\x03")  # a record cut short by a full disk
    times.stamp(5, 20.0)

    assert (tmp_path / "1.times").stat().st_size == 32
    assert times.offset_since(15.0, end=9) == 5
