"""Memory sizes as people write them (`24GiB`, `80G`, `40960MiB`), read in one place.

Units are binary, as GPU memory is counted: `K`, `M`, `G`, `T`, with or without `i`
and `B` (`80G` is `80GiB`), case-insensitive; a bare number is bytes. Standard
library only: `job submit` and `jobd worker` parse sizes before pydantic is loaded.
"""

from __future__ import annotations

import re

__all__ = ["MAX_SIZE", "SIZE_PATTERN", "format_size", "parse_size"]

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*(?:([KMGT])(?:i?B)?|B)?", re.IGNORECASE)
# For JSON Schema (the OpenAPI document): the sizes every reader accepts, so a size the
# schema allows is never refused. Stricter than `_SIZE`: at least 1 byte (a leading digit
# of 1-9: no `0.5GiB`), and few enough digits per unit to stay under MAX_SIZE.
_SCHEMA_UNITS = (("[bB]?", 14), ("[kK]", 11), ("[mM]", 8), ("[gG]", 5), ("[tT]", 2))
SIZE_PATTERN = (
    r"^\s*("
    + "|".join(
        rf"[1-9]\d{{0,{digits}}}(\.\d+)?\s*{unit}" + ("([iI]?[bB])?" if unit != "[bB]?" else "")
        for unit, digits in _SCHEMA_UNITS
    )
    + r")\s*$"
)
MAX_SIZE = 1 << 50  # a petabyte of memory on one GPU is a typo, not a GPU


def parse_size(text: str) -> int:
    """Bytes in `text`; ValueError with the reason when it is no size."""
    match = _SIZE.fullmatch(text.strip())
    if not match:
        raise ValueError(f"{text!r} is not a size (a number and a unit: 24GiB, 80G, 40960MiB)")
    number, unit = match.groups()
    size = float(number) * _UNITS[(unit or "").upper()]
    if not size <= MAX_SIZE:  # a thousand nines is infinity, which no int holds
        raise ValueError(f"{text!r}: a size must be at most {format_size(MAX_SIZE)}")
    if int(size) <= 0:
        raise ValueError(f"{text!r}: a size must be more than 0 bytes")
    return int(size)


def format_size(size: int) -> str:
    """`size` bytes in the largest binary unit that keeps it short: 24GiB, 1.5GiB, 512B."""
    for unit in ("T", "G", "M", "K"):
        scale = _UNITS[unit]
        if size >= scale:
            value = size / scale
            text = f"{value:.0f}" if value == int(value) else f"{value:.1f}"
            return f"{text}{unit}iB"
    return f"{size}B"
