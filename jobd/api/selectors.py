"""Label selectors, as kubectl's `-l`: `team=vision,tier!=batch,owner,!scratch`.

A selector is a comma-separated list of requirements, all of which a resource's labels
must meet: `key=value` (or `key==value`), `key!=value` (the key absent, or another
value), `key` (present, any value) and `!key` (absent). The broker filters lists with
it (`GET /jobs?selector=...`) and the CLI's watch filters changes with the same rules.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

__all__ = ["Requirement", "Selector", "parse_selector"]

Op = Literal["=", "!=", "exists", "!exists"]
# Tried in this order: `!=` before `=`, and `==` before its own `=`.
_OPS: tuple[tuple[str, Op], ...] = (("!=", "!="), ("==", "="), ("=", "="))


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    op: Op
    value: str = ""

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.op == "=":
            return labels.get(self.key) == self.value
        if self.op == "!=":
            return labels.get(self.key) != self.value
        return (self.key in labels) == (self.op == "exists")


@dataclass(frozen=True, slots=True)
class Selector:
    requirements: tuple[Requirement, ...]

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        found = labels or {}
        return all(r.matches(found) for r in self.requirements)


def parse_selector(text: str) -> Selector:
    """The selector `text` says; ValueError, one sentence, for what is not one."""
    parts = [p.strip() for p in text.split(",")]
    if not any(parts):
        raise ValueError("an empty label selector; say KEY=VALUE (several joined by ',')")
    return Selector(tuple(_requirement(part, text) for part in parts))


def _requirement(part: str, text: str) -> Requirement:
    if not part:
        raise ValueError(f"label selector {text!r} has an empty requirement (two commas?)")
    for token, op in _OPS:
        key, found, value = part.partition(token)
        if found:
            return Requirement(_key(key.strip(), text), op, value.strip())
    if part.startswith("!"):
        return Requirement(_key(part[1:].strip(), text), "!exists")
    return Requirement(_key(part, text), "exists")


def _key(key: str, text: str) -> str:
    if not key or any(c in key for c in "!= "):
        raise ValueError(
            f"label selector {text!r}: {key!r} is not a label key "
            "(say KEY=VALUE, KEY!=VALUE, KEY or !KEY)"
        )
    return key
