"""JSON for the shim from CPython's C accelerator (`_json`) alone, without the json package.

The json package imports `re` for its pure-Python fallbacks: 1.3 MiB of every shim's RSS
for nothing, as a shim reads and writes only small documents of strings, numbers, true,
false, null, lists and objects, which `_json`'s scanner and encoder handle whole in C.
What they write is byte for byte json.dumps's with its defaults (and sort_keys where
asked); what they read is what json.loads reads. An interpreter without `_json` (not
CPython) gets the json package.

Standard library only.
"""

from __future__ import annotations

# typing.TYPE_CHECKING without importing typing, which would cost every shim 0.4 MiB.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["dumps", "loads"]

try:
    import _json
except ImportError:  # pragma: no cover - CPython always has it
    _json = None  # type: ignore[assignment]


class _Reading:
    """What json.JSONDecoder() hands the C scanner: its defaults."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_int = int
    parse_float = float
    parse_constant = float  # NaN, Infinity, -Infinity, as json reads them


def _unserializable(value: object) -> object:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


_WHITESPACE = " \t\n\r"
_scan = None if _json is None else _json.make_scanner(_Reading())  # type: ignore[arg-type]
_encoders = (
    None
    if _json is None
    else {
        sort: _json.make_encoder(
            None,  # no check for cycles: a shim's documents have none
            _unserializable,
            _json.encode_basestring_ascii,
            None,
            ": ",
            ", ",
            sort,
            False,
            True,
        )
        for sort in (False, True)
    }
)


def loads(text: bytes | str) -> Any:
    """The document in text, as json.loads reads it; ValueError if it is not JSON."""
    if _scan is None:  # pragma: no cover
        import json

        return json.loads(text)
    if isinstance(text, bytes):
        text = text.decode()
    text = text.strip(_WHITESPACE)
    try:
        value, end = _scan(text, 0)
    except StopIteration:
        raise ValueError("not a JSON document") from None
    if end != len(text):
        raise ValueError(f"extra data after a JSON document at {end}")
    return value


def dumps(value: object, sort_keys: bool = False) -> str:
    """value as json.dumps writes it (sort_keys likewise)."""
    if _encoders is None:  # pragma: no cover
        import json

        return json.dumps(value, sort_keys=sort_keys)
    return "".join(_encoders[sort_keys](value, 0))
