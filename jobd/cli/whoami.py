"""`job whoami`: who the broker knows the caller as, and how (docs/security.md)."""

from __future__ import annotations

import click

from jobd.cli.options import client, output_option, print_documents
from jobd.wire import calls
from jobd.wire.answers import Document

__all__ = ["VERBS"]

_HOW = {
    "socket": "the Unix socket's peer ({label})",
    "token": "token {label!r}",
    "vouched": "a worker's agent ({label})",
}


@click.command()
@output_option("text")
def whoami(output: str) -> None:
    """Show who the broker knows you as: user, uid, groups, admin or not, and how."""
    with client() as broker:
        found = broker.run(calls.whoami())
        server = broker.server
    if output != "text":
        print_documents([found], output, single=True)
        return
    for name, value in _lines(found, server):
        click.echo(f"{name + ':':<10}{value}")


def _lines(found: Document, server: str) -> list[tuple[str, str]]:
    user = found.get("user") or "-"
    if found.get("uid") is not None:
        user += f" (uid {found['uid']})"
    projects = found.get("projects")
    return [
        ("user", user),
        ("groups", ", ".join(found.get("groups") or []) or "-"),
        ("role", "admin" if found.get("admin") else str(found.get("role"))),
        ("known by", _HOW.get(str(found.get("via")), "{label}").format(label=found.get("label"))),
        ("projects", "all (an admin)" if projects is None else ", ".join(projects) or "none"),
        ("admin of", ", ".join(found.get("admin_of") or []) or "-"),
        ("server", server),
    ]


VERBS = (whoami,)
