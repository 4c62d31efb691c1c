"""How every `job` verb fails: one sentence on stderr, `error: ...`, and an exit code.

1 for a refusal or something not found; 2 for bad usage (click's own), and for the
errors of `job diff`, whose 1 means "there are differences".
"""

from __future__ import annotations

from typing import IO, Any

import click

__all__ = ["DiffFailure", "Failure", "warn"]


class Failure(click.ClickException):
    """One sentence on stderr as `error: ...`; exit 1 unless told otherwise."""

    def show(self, file: IO[Any] | None = None) -> None:
        click.echo(f"error: {self.message}", err=True)


class DiffFailure(Failure):
    """`job diff` keeps 1 for "there are differences", so its errors exit 2, as kubectl's."""

    exit_code = 2


def warn(text: str) -> None:
    """A line for the person at the terminal, never for a pipe reading stdout."""
    click.echo(text, err=True)
