"""`jobd token`'s work: on the store directly, or through a broker's API with --server.

Loaded when a `jobd token` command runs (tokens.py declares the commands and stays
light, as `jobd --help` must).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click
from pydantic import ValidationError

from jobd.broker.auth.tokens import mint, token_info
from jobd.cli.broker_client import JobdClient
from jobd.discovery import data_dir
from jobd.store.base import Conflict, NotFound, StoreUnavailable
from jobd.store.sql import open_store, sqlite_url
from jobd.wire import calls
from jobd.wire.client import ApiError, BrokerUnreachable
from jobd.wire.models import TokenCreated, TokenInfo, TokenRequest

__all__ = ["Tokens", "guarded", "request_of"]


class Tokens:
    """The same three operations on the store or through the API."""

    def __init__(self, kw: dict[str, Any]) -> None:
        self.kw = kw

    def create(self, request: TokenRequest) -> TokenCreated:
        if self.kw["server"]:
            created: TokenCreated = self._api(lambda c: c.run(calls.create_token(request)))
            return created
        store = self._store()
        try:
            token, record = mint(store, request)
        finally:
            store.close()
        return TokenCreated(token=token, **token_info(record).model_dump())

    def list(self) -> list[TokenInfo]:
        if self.kw["server"]:
            found: list[TokenInfo] = self._api(lambda c: c.run(calls.list_tokens()))
            return found
        store = self._store()
        try:
            return [token_info(r) for r in store.list_tokens()]
        finally:
            store.close()

    def revoke(self, label: str) -> None:
        if self.kw["server"]:
            self._api(lambda c: c.run(calls.revoke_token(label)))
            return
        store = self._store()
        try:
            store.delete_token(label)
        finally:
            store.close()

    def _store(self) -> Any:
        url = self.kw["db"] or sqlite_url(self.kw["data_dir"] or data_dir())
        return open_store(url)

    def _api(self, run: Callable[[Any], Any]) -> Any:
        with JobdClient(self.kw["server"], self.kw["admin_token"]) as client:
            return run(client)


def request_of(fields: dict[str, Any]) -> TokenRequest:
    """The token asked for, validated (a ValidationError is one sentence, in `guarded`)."""
    return TokenRequest.model_validate(fields)


def _fail(message: str) -> None:
    click.echo(f"jobd: {message}", err=True)
    raise SystemExit(1)


def guarded(run: Callable[[], Any]) -> Any:
    """Errors as one sentence on stderr, exit 1: the API's, the store's, a bad request's."""
    try:
        return run()
    except ValidationError as exc:
        _fail(str(exc.errors()[0]["msg"]).removeprefix("Value error, "))
    except (ApiError, BrokerUnreachable) as exc:
        _fail(exc.message)
    except (Conflict, NotFound, StoreUnavailable) as exc:
        _fail(str(exc))
