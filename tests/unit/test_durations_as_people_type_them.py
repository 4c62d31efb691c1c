"""`--since 10m`, `--timeout 1h30m`: durations as people type them."""

from __future__ import annotations

import pytest

from jobd.cli.durations import parse_duration


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90", 90),
        ("1.5", 1.5),
        ("45s", 45),
        ("10m", 600),
        ("2h", 7200),
        ("1d", 86400),
        ("1h30m", 5400),
        ("1H", 3600),
        ("0", 0),
    ],
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "ten", "10x", "m", "-5", "1h 30m", "nan", "inf", "5m3"])
def test_what_is_no_duration_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(text)
