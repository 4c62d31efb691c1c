"""The worker must see the checkpoint sentinel however the pipe happens to chunk it."""

from __future__ import annotations

import pytest

from jobd.client import SENTINEL
from jobd.worker.sentinel import SENTINEL_BYTES, SentinelScanner

LINE = SENTINEL_BYTES + b"\n"


def _feed_all(chunks: list[bytes]) -> list[bool]:
    scanner = SentinelScanner()
    return [scanner.feed(chunk) for chunk in chunks]


def test_matches_the_client_constant() -> None:
    assert SENTINEL_BYTES == SENTINEL.encode() == b"jobd-checkpoint-complete"


def test_whole_sentinel_in_one_chunk() -> None:
    scanner = SentinelScanner()
    assert not scanner.seen
    assert scanner.feed(b"saving...\n" + LINE)
    assert scanner.seen


@pytest.mark.parametrize("cut", range(len(LINE) + 1))
def test_split_in_two_at_every_offset(cut: int) -> None:
    results = _feed_all([b"log\n" + LINE[:cut], LINE[cut:] + b"tail"])
    complete_in_first = cut >= len(SENTINEL_BYTES)
    assert results == ([True, False] if complete_in_first else [False, True])


def test_split_in_three_at_every_pair_of_offsets() -> None:
    n = len(SENTINEL_BYTES)
    for a in range(1, n):
        for b in range(a + 1, n):
            chunks = [SENTINEL_BYTES[:a], SENTINEL_BYTES[a:b], SENTINEL_BYTES[b:]]
            assert _feed_all(chunks) == [False, False, True], (a, b)


def test_one_byte_at_a_time() -> None:
    results = _feed_all([bytes([c]) for c in b"noise " + LINE + b"more"])
    assert results.count(True) == 1
    assert results.index(True) == len(b"noise ") + len(SENTINEL_BYTES) - 1


def test_empty_chunks_are_harmless() -> None:
    assert _feed_all([b"", SENTINEL_BYTES[:5], b"", SENTINEL_BYTES[5:], b""]) == [
        False,
        False,
        False,
        True,
        False,
    ]


@pytest.mark.parametrize(
    "stream",
    [
        b"jobd-checkpoint-complet" + b"x",
        b"jobd-checkpoint-complet\n",
        b"JOBD-CHECKPOINT-COMPLETE",
        b"jobd checkpoint complete",
        b"jobd-checkpoint-",
        b"obd-checkpoint-complete",
    ],
)
def test_near_misses_do_not_match(stream: bytes) -> None:
    scanner = SentinelScanner()
    assert not any(scanner.feed(bytes([c])) for c in stream)
    assert not scanner.feed(stream)
    assert not scanner.seen


def test_near_miss_then_real_sentinel() -> None:
    scanner = SentinelScanner()
    assert not scanner.feed(b"jobd-checkpoint-complet")
    assert not scanner.feed(b"x jobd-checkpoint-")
    assert scanner.feed(b"complete\n")


def test_after_lots_of_noise() -> None:
    scanner = SentinelScanner()
    noise = bytes(range(256)) * 64
    for _ in range(200):
        assert not scanner.feed(noise)
    assert not scanner.feed(noise[:1000] + SENTINEL_BYTES[:11])
    assert scanner.feed(SENTINEL_BYTES[11:] + noise)
    assert scanner.seen


def test_after_noise_split_across_chunks() -> None:
    scanner = SentinelScanner()
    for _ in range(100):
        assert not scanner.feed(b"step=1 loss=0.5\n" * 50)
    assert not scanner.feed(b"x" * 4096 + SENTINEL_BYTES[:7])
    assert scanner.feed(SENTINEL_BYTES[7:] + b"\n")


def test_true_only_once() -> None:
    scanner = SentinelScanner()
    assert scanner.feed(LINE)
    assert not scanner.feed(LINE)
    assert scanner.seen


def test_reset_forgets_carry_over() -> None:
    scanner = SentinelScanner()
    assert not scanner.feed(b"output before the grace window: jobd-checkpoint")
    scanner.reset()
    assert not scanner.feed(b"-complete\n")
    assert not scanner.seen
    assert scanner.feed(LINE)


def test_carry_over_is_bounded() -> None:
    scanner = SentinelScanner()
    scanner.feed(b"y" * 100_000)
    assert len(scanner._carry) == len(SENTINEL_BYTES) - 1


def test_rejects_empty_sentinel() -> None:
    with pytest.raises(ValueError):
        SentinelScanner(b"")


def test_single_byte_sentinel() -> None:
    scanner = SentinelScanner(b"!")
    assert not scanner.feed(b"abc")
    assert scanner.feed(b"d!")
