"""What the `job` verbs share: `-o`, `--phase`, and the client `job`'s own options make.

`-o json` and `-o yaml` are on every verb that prints, so a script never parses a table:
json is one document, or a list of them when the verb was given several (or a selector).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import click

from jobd.api.vocabulary import Phase

if TYPE_CHECKING:
    from jobd.cli.broker_client import JobdClient

__all__ = ["PHASES", "client", "output_option", "phase_option", "print_documents"]

F = TypeVar("F", bound=Callable[..., Any])
PHASES = [p.value for p in Phase]


def client() -> JobdClient:
    """A client of the broker `job --server/--token` point at (the root's Settings)."""
    made: JobdClient = click.get_current_context().find_root().obj.client()
    return made


def output_option(*formats: str, default: str | None = None) -> Callable[[F], F]:
    """`-o FORMAT`: the verb's own formats, then json and yaml; the first is the default."""
    choices = [*formats, "json", "yaml"]
    return click.option(
        "-o",
        "--output",
        type=click.Choice(choices),
        default=default or choices[0],
        show_default=True,
        help="Output format: json and yaml print the documents, for scripts.",
    )


def phase_option(help_text: str) -> Callable[[F], F]:
    """`--phase P`, repeatable, in any case (`failed` is Failed)."""
    return click.option(
        "--phase",
        multiple=True,
        type=click.Choice(PHASES, case_sensitive=False),
        help=help_text,
    )


def print_documents(docs: Sequence[Any], output: str, *, single: bool = False) -> None:
    """Documents as JSON (one, or a list) or as multi-document YAML."""
    if output == "json":
        from jobd.cli import render

        click.echo(render.to_json(docs[0] if single and docs else list(docs)))
    else:
        from jobd.api.manifests import dump_yaml

        click.echo(dump_yaml(list(docs)), nl=False)
