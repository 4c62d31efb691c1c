"""Durations as people type them: `90`, `45s`, `10m`, `2h`, `1d`, `1h30m`."""

from __future__ import annotations

import re

import click

__all__ = ["Duration", "parse_duration"]

_PART = r"(\d+(?:\.\d+)?)([smhd])"  # compiled on first use (re's cache), not by `job --help`
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> float:
    """Seconds in `text`; ValueError, one sentence, for what is not a duration."""
    spoken = text.strip().lower()
    try:
        seconds = float(spoken)  # a bare number is seconds
    except ValueError:
        parts = re.findall(_PART, spoken)
        if not parts or "".join(n + u for n, u in parts) != spoken:
            raise ValueError(
                f"{text!r} is not a duration (say 90, 45s, 10m, 2h, 1d or 1h30m)"
            ) from None
        seconds = sum(float(n) * _SECONDS[u] for n, u in parts)
    if not 0 <= seconds < float("inf"):
        raise ValueError(f"{text!r} is not a duration of zero or more seconds")
    return seconds


class Duration(click.ParamType[float]):
    """A click parameter of a duration, given to the verb as seconds."""

    name = "duration"

    def convert(
        self, value: object, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        if isinstance(value, float):
            return value
        try:
            return parse_duration(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)
