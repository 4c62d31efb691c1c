"""docs/events.md, read as the schema of every event: its tables of events and fields.

The tests hold the code to it: tests/conftest.py checks every event any test commits,
and the end-to-end test of monitoring checks the events.jsonl of a real `jobd dev`.
An event row names its fields in backticks in its second column (what parentheses say
is commentary, not a field); the Fields table gives each field its one JSON type.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

__all__ = ["EventsDoc", "events_doc"]

DOC = Path(__file__).resolve().parents[1] / "docs" / "events.md"
_ALWAYS = frozenset({"ts", "seq", "event"})
_FROM_WORKER = frozenset({"worker", "observed_at"})
_JSON_TYPES: dict[str, type] = {"string": str, "integer": int, "number": float, "boolean": bool}


@dataclass(frozen=True)
class EventsDoc:
    broker: dict[str, frozenset[str]]  # event -> the fields a line of it may carry
    worker: dict[str, frozenset[str]]
    types: dict[str, str]  # field -> "integer or null", "array of integer", ...

    @property
    def events(self) -> dict[str, frozenset[str]]:
        return {**self.broker, **self.worker}

    def problems(self, line: dict[str, Any]) -> list[str]:
        """What in one event's JSON object the doc does not say; empty when all is as said."""
        name = line.get("event")
        fields = self.events.get(str(name))
        if fields is None:
            return [f"{name} is not in docs/events.md"]
        found = []
        for key, value in line.items():
            if key not in fields:
                found.append(f"{name} carries {key}, which docs/events.md does not list")
            elif not is_type(self.types[key], value):
                found.append(f"{name}.{key} = {value!r} is not {self.types[key]}")
        return found


@cache
def events_doc() -> EventsDoc:
    text = DOC.read_text()
    broker = _section(text, "### Written by the broker")
    worker = _section(text, "### Written by the worker")
    types = {row[0].strip("`"): row[1] for row in _rows(text, "### Fields")}
    return EventsDoc(
        {k: v | _ALWAYS for k, v in broker.items()},
        {k: v | _ALWAYS | _FROM_WORKER for k, v in worker.items()},
        types,
    )


def is_type(documented: str, value: Any) -> bool:
    """Does `value` have the documented JSON type? `bool` is no integer, and an integer no
    number (a log store maps 1 and 1.5 differently)."""
    kind, _, nullable = documented.partition(" or ")
    if value is None:
        return nullable == "null"
    if kind.startswith("array of "):
        item = kind.removeprefix("array of ")
        return isinstance(value, list) and all(is_type(item, v) for v in value)
    return type(value) is _JSON_TYPES[kind]


def _section(text: str, heading: str) -> dict[str, frozenset[str]]:
    events = {}
    for row in _rows(text, heading):
        named = re.sub(r"\([^)]*\)", "", row[1])
        events[row[0].strip("`")] = frozenset(re.findall(r"`([a-z_]+)`", named))
    return events


def _rows(text: str, heading: str) -> list[list[str]]:
    section = text.split(heading, 1)[1].split("\n### ", 1)[0]
    return [
        [cell.strip() for cell in line.strip().strip("|").split("|")]
        for line in section.splitlines()
        if line.startswith("| `")
    ]
