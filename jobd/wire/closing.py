"""What every client of the broker is as a context manager: itself on entry, closed on
exit (`close`, or `aclose` for the async ones), whatever the exit.

Standard library only: the `job` command and the worker's agent load it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from types import TracebackType
    from typing import Self

__all__ = ["AsyncClosing", "Closing"]


class Closing:
    """`with client:` closes it at the end; the client says what closing is."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class AsyncClosing:
    """`async with client:` closes it at the end; the client says what closing is."""

    async def aclose(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
