"""Records the shim's messages are made of, without `dataclasses`.

`dataclasses` imports inspect, ast, dis and re: ~3 MiB of every shim's RSS, and each
class made with it compiles its methods with `exec` at import. A Record writes its own
typed `__init__` (so mypy checks every construction as it would a dataclass's); equality
(to a record of the same class and fields), hashing, `repr` and `replace` come from its
fields here, as a dataclass has them. (jobd.api.frozen is the same idea for the agent's
clients; the shim may not import outside jobd.worker.shim, and its records may change.)

Standard library only.
"""

from __future__ import annotations

# typing.TYPE_CHECKING without importing typing, which would cost every shim 0.4 MiB.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Self

__all__ = ["Record"]


class Record:
    """Fields are what `__init__` assigns, in that order."""

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self.__dict__ == other.__dict__

    def __hash__(self) -> int:
        return hash(tuple(self.__dict__.values()))

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={value!r}" for name, value in self.__dict__.items())
        return f"{type(self).__qualname__}({fields})"

    def replace(self, **changes: Any) -> Self:
        """A copy with changes, as dataclasses.replace makes one."""
        return type(self)(**{**self.__dict__, **changes})
