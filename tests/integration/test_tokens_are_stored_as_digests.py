"""The tokens table on SQLite and PostgreSQL: digests only, labels unique, revocation and
last use; and the broker's in-memory table, which counts store-side changes on reload."""

from __future__ import annotations

import pytest

from jobd.broker.auth.tokens import Tokens, digest, mint
from jobd.store import SQLStore
from jobd.store.base import Conflict, NotFound, TokenRecord
from jobd.wire.models import TokenRequest


def test_tokens_are_kept_as_digests_with_unique_labels(store: SQLStore) -> None:
    token, record = mint(store, TokenRequest(role="user", projects=["b", "a", "b"], name="al"))
    assert record.digest == digest(token).hex() and token not in repr(store.list_tokens())
    assert store.list_tokens() == [record] and record.projects == ("a", "b")
    with pytest.raises(Conflict, match="'al'"):
        store.create_token(TokenRecord("al", "00" * 32, "admin", created_at="x"))
    store.touch_tokens({"al": "2026-12-03T10:00:00Z", "gone": "2026-12-03T10:00:00Z"})
    assert store.list_tokens()[0].last_used_at == "2026-12-03T10:00:00Z"
    store.delete_token("al")
    assert store.list_tokens() == []
    with pytest.raises(NotFound, match="'al'"):
        store.delete_token("al")


def test_the_broker_table_resolves_by_digest_and_sees_store_changes_on_reload(
    store: SQLStore,
) -> None:
    tokens = Tokens(store, "the-admin-token")
    assert tokens.resolve(b"Bearer the-admin-token") is tokens.builtin
    token, _ = mint(store, TokenRequest(role="worker", worker="w1", name="w1"))
    header = f"Bearer {token}".encode()
    # Made behind the broker's back (`jobd token create`): looked up in the store at once.
    assert tokens.resolve(header) is not None
    tokens.reload()
    worker = tokens.resolve(header)
    assert worker is not None and (worker.role, worker.worker) == ("worker", "w1")
    assert tokens.flush() == 1 and store.list_tokens()[0].last_used_at is not None
    assert tokens.flush() == 0  # not used since: nothing written
    store.delete_token("w1")
    tokens.reload()
    assert tokens.resolve(header) is None
