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
    from jobd.wire.models import TokenCreated, TokenInfo, TokenRequest

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


class _Tokens:
    """The same three operations on the store or through the API."""

    def __init__(self, kw: dict[str, Any]) -> None:
        self.kw = kw

    def create(self, request: TokenRequest) -> TokenCreated:
        if self.kw["server"]:
            from jobd.wire import calls

            created: TokenCreated = self._api(lambda c: c.run(calls.create_token(request)))
            return created
        from jobd.broker.auth.tokens import mint, token_info
        from jobd.wire.models import TokenCreated

        store = self._store()
        try:
            token, record = mint(store, request)
        finally:
            store.close()
        return TokenCreated(token=token, **token_info(record).model_dump())

    def list(self) -> list[TokenInfo]:
        if self.kw["server"]:
            from jobd.wire import calls

            found: list[TokenInfo] = self._api(lambda c: c.run(calls.list_tokens()))
            return found
        from jobd.broker.auth.tokens import token_info

        store = self._store()
        try:
            return [token_info(r) for r in store.list_tokens()]
        finally:
            store.close()

    def revoke(self, label: str) -> None:
        if self.kw["server"]:
            from jobd.wire import calls

            self._api(lambda c: c.run(calls.revoke_token(label)))
            return
        store = self._store()
        try:
            store.delete_token(label)
        finally:
            store.close()

    def _store(self) -> Any:
        from jobd.discovery import data_dir
        from jobd.store.sql import open_store, sqlite_url

        url = self.kw["db"] or sqlite_url(self.kw["data_dir"] or data_dir())
        return open_store(url)

    def _api(self, run: Callable[[Any], Any]) -> Any:
        from jobd.cli.broker_client import JobdClient

        with JobdClient(self.kw["server"], self.kw["admin_token"]) as client:
            return run(client)


def _fail(message: str) -> None:
    click.echo(f"jobd: {message}", err=True)
    raise SystemExit(1)


def _guarded(run: Callable[[], Any]) -> Any:
    """Errors as one sentence on stderr, exit 1: the API's, the store's, a bad request's."""
    from pydantic import ValidationError

    from jobd.store.base import Conflict, NotFound, StoreUnavailable
    from jobd.wire.client import ApiError, BrokerUnreachable

    try:
        return run()
    except ValidationError as exc:
        _fail(str(exc.errors()[0]["msg"]).removeprefix("Value error, "))
    except (ApiError, BrokerUnreachable) as exc:
        _fail(exc.message)
    except (Conflict, NotFound, StoreUnavailable) as exc:
        _fail(str(exc))


@click.group()
def token() -> None:
    """Tokens with roles: admin, user (of projects), worker (of one worker)."""


@token.command()
@click.option(
    "--role", required=True, type=click.Choice(["admin", "user", "worker"]), help="What it may do."
)
@click.option("--project", "projects", multiple=True, help="A user token's project (repeatable).")
@click.option("--worker", help="A worker token's worker name.")
@click.option("--name", help="Its label (unique). [default: ROLE-<random>]")
@_where
def create(
    role: str, projects: tuple[str, ...], worker: str | None, name: str | None, **kw: Any
) -> None:
    """Make a token and print it, once: nothing keeps it but its SHA-256 digest."""

    def make() -> TokenCreated:
        from jobd.wire.models import TokenRequest

        fields = {"role": role, "projects": list(projects), "worker": worker, "name": name}
        request = TokenRequest.model_validate(fields)
        return _Tokens(kw).create(request)

    created: TokenCreated = _guarded(make)
    scope = _scope(created)
    click.echo(f"token {created.label} ({created.role}{scope}): shown once, keep it safe", err=True)
    click.echo(created.token)


@token.command("list")
@click.option("-o", "--output", type=click.Choice(["table", "json"]), default="table")
@_where
def list_(output: str, **kw: Any) -> None:
    """The tokens: label, role, scope, created, last used (never a token)."""
    found: list[TokenInfo] = _guarded(lambda: _Tokens(kw).list())
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
    _guarded(lambda: _Tokens(kw).revoke(label))
    click.echo(f"token {label} revoked")


def _scope(info: TokenInfo) -> str:
    if info.projects:
        return " of projects " + ",".join(info.projects)
    if info.worker:
        return f" of worker {info.worker}"
    return ""


def _scope_cell(info: TokenInfo) -> str:
    if info.projects:
        return "projects=" + ",".join(info.projects)
    return f"worker={info.worker}" if info.worker else "-"
