"""A token `jobd token create` printed works on its first request (issue 21).

`jobd token create` writes the store directly while the broker runs, and the broker read
its table once a second: 8 of 10 new tokens were refused on their first `job get`. The
broker now looks a token it does not know up in the store before refusing it, and a
flood of unknown tokens costs a bounded number of store reads, not one each.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from jobd.broker.auth.tokens import TOKEN_PREFIX, mint
from jobd.store.sql import open_store, sqlite_url
from jobd.wire.models import TokenRequest
from tests.integration.conftest import broker_state

pytestmark = pytest.mark.anyio


def _created_against_the_store(data_dir: Path, request: TokenRequest) -> str:
    """What `jobd token create` does without --server: its own connection to the store."""
    store = open_store(sqlite_url(data_dir))
    try:
        return mint(store, request)[0]
    finally:
        store.close()


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def test_ten_new_tokens_each_work_on_their_first_request(
    api: httpx.AsyncClient, tmp_path: Path
) -> None:
    for i in range(10):
        request = TokenRequest(role="user", projects=[f"p{i}"], name=f"u{i}")
        token = _created_against_the_store(tmp_path / "data", request)
        answer = await api.get("/jobs", params={"project": f"p{i}"}, headers=_bearer(token))
        assert answer.status_code == 200, (i, answer.text)


async def test_a_flood_of_unknown_tokens_reads_the_store_a_bounded_number_of_times(
    api: httpx.AsyncClient,
) -> None:
    store = broker_state(api).store
    reads = 0
    list_tokens = store.list_tokens

    def counted() -> list:  # type: ignore[type-arg]
        nonlocal reads
        reads += 1
        return list_tokens()

    store.list_tokens = counted  # type: ignore[method-assign]
    for i in range(200):  # each unknown, of jobd's form
        bad = TOKEN_PREFIX + f"{i:043d}"
        assert (await api.get("/jobs", headers=_bearer(bad))).status_code == 401
    assert reads <= 25  # a burst of 10, and 10 a second after it: not one each
    before = reads
    for _ in range(100):  # one bad token again and again: remembered as refused
        assert (await api.get("/jobs", headers=_bearer(TOKEN_PREFIX + "0" * 43))).status_code == 401
    for _ in range(100):  # not of jobd's form: never looked up
        assert (await api.get("/jobs", headers=_bearer("guess"))).status_code == 401
    assert reads == before
