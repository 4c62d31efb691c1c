"""`jobd token create|list|revoke`: tokens with roles (CONTRACT.md §8, docs/security.md).

Like `kubeadm token`, these work on the store directly by default (`--data-dir`, `--db`,
as `jobd broker` takes them): that is how the first token is made on a fresh machine,
broker running or not, and a running broker sees the change within a second. With
`--server URL` they go through the broker's API instead, with an admin token
(`--token`/`JOBD_TOKEN`), for an admin on another machine.

A token is printed once, on stdout alone; nothing else keeps it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

if TYPE_CHECKING:  # jobd.wire loads httpx: not at import, which `jobd worker` shares
    from jobd.wire.models import TokenCreated, TokenInfo

__all__ = ["token"]

F = TypeVar("F", bound=Callable[..., Any])


def _where(f: F) -> F:
    options = [
        click.option(
            "--server",
            help="Go through this broker's API (with an admin --token) instead of the store.",
        ),
        click.option(
            "--token", "admin_token", envvar="JOBD_TOKEN", help="Admin token, with --server."
        ),
        click.option(
            "--data-dir",
            envvar="JOBD_DATA_DIR",
            type=click.Path(path_type=Path),
            help="The broker's data dir (its SQLite store). [default: as jobd broker]",
        ),
        click.option("--db", envvar="JOBD_DB", help="The store's URL. [default: as jobd broker]"),
    ]
    for option in reversed(options):
        f = option(f)
    return f


@click.group()
def token() -> None:
    """Tokens with roles: admin, user (of projects), worker (of one worker)."""


@token.command()
@click.option(
    "--role", required=True, type=click.Choice(["admin", "user", "worker"]), help="What it may do."
)
@click.option(
    "--project",
    "projects",
    multiple=True,
    help="A user token's project (repeatable); with --user, narrows the user's projects.",
)
@click.option(
    "--user",
    help="The Unix user a user token speaks for: its jobs are theirs, and it reaches the "
    "projects the user is a member of.",
)
@click.option("--worker", help="A worker token's worker name.")
@click.option("--name", help="Its label (unique). [default: ROLE-<random>]")
@_where
def create(
    role: str,
    projects: tuple[str, ...],
    user: str | None,
    worker: str | None,
    name: str | None,
    **kw: Any,
) -> None:
    """Make a token and print it, once: nothing keeps it but its SHA-256 digest."""

    from jobd.daemon import token_admin  # the store and the wire: when the command runs

    def make() -> TokenCreated:
        fields = {
            "role": role,
            "projects": list(projects),
            "user": user,
            "worker": worker,
            "name": name,
        }
        return token_admin.Tokens(kw).create(token_admin.request_of(fields))

    created: TokenCreated = token_admin.guarded(make)
    scope = _scope(created)
    click.echo(f"token {created.label} ({created.role}{scope}): shown once, keep it safe", err=True)
    click.echo(created.token)


@token.command("list")
@click.option("-o", "--output", type=click.Choice(["table", "json"]), default="table")
@_where
def list_(output: str, **kw: Any) -> None:
    """The tokens: label, role, scope, created, last used (never a token)."""
    from jobd.daemon import token_admin

    found: list[TokenInfo] = token_admin.guarded(lambda: token_admin.Tokens(kw).list())
    if output == "json":
        click.echo(json.dumps([t.model_dump() for t in found], indent=2))
        return
    rows = [("LABEL", "ROLE", "SCOPE", "CREATED", "LAST USED")]
    rows += [
        (t.label, t.role, _scope_cell(t), t.created_at, t.last_used_at or "never") for t in found
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    for row in rows:
        click.echo("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())


@token.command()
@click.argument("label")
@_where
def revoke(label: str, **kw: Any) -> None:
    """Revoke a token: refused from the next request (a broker elsewhere: within a second)."""
    from jobd.daemon import token_admin

    token_admin.guarded(lambda: token_admin.Tokens(kw).revoke(label))
    click.echo(f"token {label} revoked")


def _scope(info: TokenInfo) -> str:
    if info.user:
        narrowed = f", projects {','.join(info.projects)}" if info.projects else ""
        return f" {info.user}{narrowed}"
    if info.projects:
        return " of projects " + ",".join(info.projects)
    if info.worker:
        return f" of worker {info.worker}"
    return ""


def _scope_cell(info: TokenInfo) -> str:
    if info.user:
        narrowed = ",projects=" + ",".join(info.projects) if info.projects else ""
        return f"user={info.user}{narrowed}"
    if info.projects:
        return "projects=" + ",".join(info.projects)
    return f"worker={info.worker}" if info.worker else "-"
