"""Small immutable records made without `dataclasses`, for what every client imports.

A frozen dataclass compiles its `__init__`, `__repr__`, `__eq__`, `__hash__`,
`__setattr__` and `__delattr__` with `exec` when its class is made: ~3.6 M instructions
(~0.7 ms) a class, paid by every process that imports it before it does anything. Fifteen
of them were 60 M of `job get`'s 400 M (docs/performance.md). A `Frozen` class writes its
own typed `__init__` (so mypy checks every construction as it did the dataclass's) and
hands its fields to `_set`, once; equality, hashing, `repr` and the refusal to change a
field are shared here, as a frozen dataclass has them. The wire's answers and routes and
the `job` command's records are made of it.
"""

from __future__ import annotations

from typing import Any, NoReturn

__all__ = ["Frozen"]


class Frozen:
    """Fields set by `__init__` through `_set`, then read only; equal (to a record of the same
    class and fields), hashed and shown by its fields, as a frozen dataclass is."""

    def _set(self, **fields: Any) -> None:
        """The record's fields, in the order `repr` shows them; called once, by `__init__`."""
        self.__dict__.update(fields)

    def __setattr__(self, name: str, value: object) -> NoReturn:
        raise AttributeError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> NoReturn:
        raise AttributeError(f"cannot delete field {name!r}")

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self.__dict__ == other.__dict__

    def __hash__(self) -> int:
        return hash(tuple(self.__dict__.values()))

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={value!r}" for name, value in self.__dict__.items())
        return f"{type(self).__qualname__}({fields})"
