"""`POST /ui/logout` ends the session on the server, not only in the browser (issue 21).

Before, the cookie was only deleted from the browser that signed out: a copy of it (a
second tab's, a proxy's log, a shared machine's profile) still opened every page. Now the
broker refuses the cookie from the moment its session is signed out, after a restart too,
while other sessions of the same token go on.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from jobd.broker.state import BrokerConfig
from jobd.broker.ui.sessions import COOKIE
from tests.integration.conftest import broker_client

pytestmark = pytest.mark.anyio

ADMIN = "an-admin-token-long-enough-for-the-dashboard-0123"


def _config(tmp_path: Path) -> BrokerConfig:
    return BrokerConfig(data_dir=tmp_path / "data", log_dir=tmp_path / "logs", token=ADMIN)


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    async with broker_client(_config(tmp_path)) as c:
        yield c


def _browser(api: httpx.AsyncClient, cookie: str | None = None) -> httpx.AsyncClient:
    browser = httpx.AsyncClient(transport=api._transport, base_url="http://jobd")
    if cookie is not None:
        browser.cookies.set(COOKIE, cookie, path="/ui")
    return browser


async def _sign_in(api: httpx.AsyncClient) -> str:
    made = await api.post("/login-codes")
    assert made.status_code == 201, made.text
    async with _browser(api) as browser:
        answer = await browser.get(made.json()["path"])
    assert answer.status_code == 303
    return answer.cookies[COOKIE]


async def _status(api: httpx.AsyncClient, cookie: str) -> int:
    async with _browser(api, cookie) as browser:
        return (await browser.get("/ui")).status_code


async def test_a_signed_out_cookie_opens_nothing_and_other_sessions_go_on(
    api: httpx.AsyncClient,
) -> None:
    signed_out, other = await _sign_in(api), await _sign_in(api)
    assert await _status(api, signed_out) == 200 and await _status(api, other) == 200
    async with _browser(api, signed_out) as browser:
        assert (await browser.post("/ui/logout")).status_code == 200
    assert await _status(api, signed_out) == 401  # a copy of the cookie, kept elsewhere
    assert await _status(api, other) == 200


async def test_a_signed_out_session_stays_ended_after_a_restart(tmp_path: Path) -> None:
    async with broker_client(_config(tmp_path)) as api:
        cookie = await _sign_in(api)
        async with _browser(api, cookie) as browser:
            assert (await browser.post("/ui/logout")).status_code == 200
    async with broker_client(_config(tmp_path)) as restarted:
        assert await _status(restarted, cookie) == 401
    ended = tmp_path / "data" / "ui-sessions-ended"
    assert ended.stat().st_mode & 0o077 == 0
