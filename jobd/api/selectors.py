"""Label selectors, as kubectl's `-l`: `team=vision,tier!=batch,owner,!scratch`.

A selector is a comma-separated list of requirements, all of which a resource's labels
must meet: `key=value` (or `key==value`), `key!=value` (the key absent, or another
value), `key` (present, any value) and `!key` (absent). A key holds no `!`, `=`, `,`,
space or tab; a value no `,`; spaces and tabs around either are dropped. The broker
filters lists with it (`GET /jobs?selector=...`, whose schema states SELECTOR_PATTERN,
the parser's own rule) and the CLI's watch filters changes with the same rules.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Literal

from jobd.api.frozen import Frozen

__all__ = ["SELECTOR_PATTERN", "Requirement", "Selector", "parse_selector"]

Op = Literal["=", "!=", "exists", "!exists"]

# Spaces and tabs only, spelt out: `\s` means other characters to ECMA-262 than to Python,
# and the OpenAPI document's pattern must take exactly what the parser takes.
_SP = "[ \t]*"
_KEY = "[^!=, \t]+"
_REQUIREMENT = f"{_SP}(?:!{_SP}{_KEY}|{_KEY}(?:{_SP}(?:==|!=|=)[^,]*)?){_SP}"
# What a selector is, for the OpenAPI document.
SELECTOR_PATTERN = f"^{_REQUIREMENT}(?:,{_REQUIREMENT})*$"
_PARSE = re.compile(
    f"{_SP}(?:!{_SP}(?P<absent>{_KEY})|(?P<key>{_KEY})(?:{_SP}(?P<op>==|!=|=)(?P<value>[^,]*))?){_SP}"
)


class Requirement(Frozen):
    key: str
    op: Op
    value: str

    def __init__(self, key: str, op: Op, value: str = "") -> None:
        self._set(key=key, op=op, value=value)

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.op == "=":
            return labels.get(self.key) == self.value
        if self.op == "!=":
            return labels.get(self.key) != self.value
        return (self.key in labels) == (self.op == "exists")


class Selector(Frozen):
    requirements: tuple[Requirement, ...]

    def __init__(self, requirements: tuple[Requirement, ...]) -> None:
        self._set(requirements=requirements)

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        found = labels or {}
        return all(r.matches(found) for r in self.requirements)


def parse_selector(text: str) -> Selector:
    """The selector `text` says; ValueError, one sentence, for what is not one."""
    return Selector(tuple(_requirement(part, text) for part in text.split(",")))


def _requirement(part: str, text: str) -> Requirement:
    found = _PARSE.fullmatch(part)
    if found is None:
        raise ValueError(
            f"label selector {text!r}: {part.strip()!r} is not a requirement "
            "(say KEY=VALUE, KEY!=VALUE, KEY or !KEY, joined by ',')"
        )
    if found["absent"] is not None:
        return Requirement(found["absent"], "!exists")
    op, value = found["op"], (found["value"] or "").strip(" \t")
    if op is None:
        return Requirement(found["key"], "exists")
    return Requirement(found["key"], "!=" if op == "!=" else "=", value)
