"""A watch held open by a token that is then revoked delivers nothing after the
revocation (issue 21): it answers 401, as any request of that token now does.

Before, the held watch passed on the next change committed after the token was revoked.
"""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import pytest

from tests.integration.conftest import job_document

pytestmark = pytest.mark.anyio


async def _user_token(api: httpx.AsyncClient, label: str) -> dict[str, str]:
    made = await api.post("/tokens", json={"role": "user", "projects": ["a"], "name": label})
    assert made.status_code == 201, made.text
    return {"Authorization": f"Bearer {made.json()['token']}"}


def _job_of_a(name: str) -> dict[str, Any]:
    doc = job_document(name)
    doc["metadata"]["project"] = "a"
    return doc


async def _held_watch(api: httpx.AsyncClient, headers: dict[str, str]) -> httpx.Response:
    revision = (await api.get("/jobs", headers=headers)).json()["revision"]
    params: dict[str, Any] = {"since": revision, "timeout": 10}
    return await api.get("/watch", params=params, headers=headers)


async def test_a_change_committed_after_the_revocation_is_not_delivered(
    api: httpx.AsyncClient,
) -> None:
    headers = await _user_token(api, "carol")
    answers: list[httpx.Response] = []

    async def watch() -> None:
        answers.append(await _held_watch(api, headers))

    async with anyio.create_task_group() as tg:
        tg.start_soon(watch)
        await anyio.sleep(0.3)  # the watch is held, waiting for a change
        assert (await api.delete("/tokens/carol")).status_code == 200
        assert (await api.post("/jobs", json=_job_of_a("after"))).status_code == 201
    [answer] = answers
    assert answer.status_code == 401, answer.text
    assert "revoked" in answer.json()["detail"]
    assert "after" not in answer.text


async def test_a_watch_of_a_valid_token_still_delivers(api: httpx.AsyncClient) -> None:
    headers = await _user_token(api, "dave")
    answers: list[httpx.Response] = []

    async def watch() -> None:
        answers.append(await _held_watch(api, headers))

    async with anyio.create_task_group() as tg:
        tg.start_soon(watch)
        await anyio.sleep(0.3)
        assert (await api.post("/jobs", json=_job_of_a("seen"))).status_code == 201
    [answer] = answers
    assert answer.status_code == 200, answer.text
    assert [c["object"]["metadata"]["name"] for c in answer.json()["changes"]] == ["seen"]
