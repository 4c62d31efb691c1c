"""`job usage`: fair share as the broker counts it (docs/concepts.md, "Fair share").

One table of projects (usage in billed resource-seconds, decayed; their share of the
shares; their share of the usage; the factor that orders their queued jobs within a
priority), then one of users within their projects. `-o json` prints the broker's answer.
"""

from __future__ import annotations

from typing import Any

import click

from jobd.cli.options import client, output_option, print_documents
from jobd.cli.tables import PlainTable, print_table

__all__ = ["VERBS"]


@click.command()
@output_option("table")
def usage(output: str) -> None:
    """Show fair share: each project's and user's usage, share and factor.

    Usage is in billed resource-seconds (a GPU-second bills 1; CPUs and memory by the
    broker's weights), halved every half-life; running jobs count what they used so far.
    Within one priority, queued jobs of the project with the highest factor go first.
    """
    with client() as broker:
        found = broker.usage()
    if output != "table":
        print_documents([found], output, single=True)
        return
    print_table(_projects(found["projects"]))
    if found["users"]:
        click.echo("")
        print_table(_users(found["users"]))


def _projects(rows: list[dict[str, Any]]) -> PlainTable:
    table = PlainTable("PROJECT", "USAGE", "SHARES", "SHARE", "USED", "FACTOR")
    for row in rows:
        table.add_row(
            row["project"],
            _amount(row["usage"]),
            str(row["shares"]),
            _percent(row["share"]),
            _percent(row["usage_share"]),
            f"{row['factor']:.3f}",
        )
    return table


def _users(rows: list[dict[str, Any]]) -> PlainTable:
    table = PlainTable("PROJECT", "USER", "USAGE", "SHARE", "USED", "FACTOR")
    for row in rows:
        table.add_row(
            row["project"],
            row["user"],
            _amount(row["usage"]),
            _percent(row["share"]),
            _percent(row["usage_share"]),
            f"{row['factor']:.3f}",
        )
    return table


def _amount(seconds: float) -> str:
    """Billed resource-seconds, as GPU-hours once they are many."""
    return f"{seconds / 3600:.1f}h" if seconds >= 3600 else f"{seconds:.0f}s"


def _percent(fraction: float) -> str:
    return f"{100 * fraction:.0f}%"


VERBS = [usage]
