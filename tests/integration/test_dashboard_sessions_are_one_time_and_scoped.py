"""The dashboard's sign-in and scope, driven in-process on real SQLite: a page without a
session is refused, a login code works once, a session is its token's (a user token's
sees only its projects; a revoked token's ends), and documents are masked as the API's."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from jobd.broker.auth.tokens import Tokens
from jobd.broker.state import BrokerConfig
from jobd.broker.ui.sessions import CODE_TTL_S, COOKIE, SESSION_TTL_S, Sessions
from jobd.store.sql import open_store
from tests.integration.conftest import (
    bind,
    broker_client,
    broker_state,
    job_document,
    wait_entered,
)

pytestmark = pytest.mark.anyio

ADMIN = "an-admin-token-long-enough-for-the-dashboard-0123"


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    config = BrokerConfig(data_dir=tmp_path / "data", log_dir=tmp_path / "logs", token=ADMIN)
    async with broker_client(config) as c:
        yield c


def _browser(api: httpx.AsyncClient) -> httpx.AsyncClient:
    """A client of the same app without the bearer token: as a browser comes."""
    return httpx.AsyncClient(transport=api._transport, base_url="http://jobd")


async def _sign_in(api: httpx.AsyncClient, headers: dict[str, str] | None = None) -> str:
    """The session cookie's value a login code of `headers`' token (else the admin's) gets."""
    made = await api.post("/login-codes", headers=headers)
    assert made.status_code == 201, made.text
    async with _browser(api) as browser:
        answer = await browser.get(made.json()["path"])
    assert answer.status_code == 303 and answer.headers["location"] == "/ui"
    return answer.cookies[COOKIE]


async def _page(api: httpx.AsyncClient, path: str, cookie: str | None) -> httpx.Response:
    async with _browser(api) as browser:
        if cookie is not None:
            browser.cookies.set(COOKIE, cookie, path="/ui")
        return await browser.get(path)


async def _job(api: httpx.AsyncClient, name: str, project: str = "default", **spec: Any) -> int:
    doc = job_document(name, **spec)
    doc["metadata"]["project"] = project
    made = await api.post("/jobs", json=doc)
    assert made.status_code == 201, made.text
    return int(made.json()["metadata"]["id"])


async def _user(api: httpx.AsyncClient, label: str, project: str) -> dict[str, str]:
    made = await api.post("/tokens", json={"role": "user", "projects": [project], "name": label})
    assert made.status_code == 201, made.text
    return {"Authorization": f"Bearer {made.json()['token']}"}


@pytest.mark.parametrize(
    "path", ["/ui", "/ui/jobs/1", "/ui/workers", "/ui/timeline", "/ui/stream/jobs"]
)
async def test_a_page_without_a_session_says_to_run_job_ui(
    api: httpx.AsyncClient, path: str
) -> None:
    await _job(api, "a")
    for cookie in (None, "forged.value", "e30.AAAA"):
        answer = await _page(api, path, cookie)
        assert answer.status_code == 401
        assert "job ui" in answer.text and "text/html" in answer.headers["content-type"]


async def test_a_login_code_works_once_and_sets_a_strict_http_only_cookie(
    api: httpx.AsyncClient,
) -> None:
    made = (await api.post("/login-codes")).json()
    assert made["path"] == f"/ui/login?code={made['code']}"
    assert made["expires_in_s"] == CODE_TTL_S
    async with _browser(api) as browser:
        first = await browser.get(made["path"])
        again = await browser.get(made["path"])
        wrong = await browser.get("/ui/login?code=made-up")
    assert first.status_code == 303
    cookie = first.headers["set-cookie"].lower()
    for attribute in ("httponly", "samesite=strict", "path=/ui", f"max-age={int(SESSION_TTL_S)}"):
        assert attribute in cookie
    assert "secure" not in cookie  # served over plain http here
    for refused in (again, wrong):
        assert refused.status_code == 400 and "job ui" in refused.text
    assert (await _page(api, "/ui", first.cookies[COOKIE])).status_code == 200


async def test_the_cookie_is_secure_when_the_page_is_served_over_https(
    api: httpx.AsyncClient,
) -> None:
    made = (await api.post("/login-codes")).json()
    async with httpx.AsyncClient(transport=api._transport, base_url="https://jobd") as browser:
        answer = await browser.get(made["path"])
    assert answer.status_code == 303 and "; secure" in answer.headers["set-cookie"].lower()


async def test_only_a_user_or_admin_token_gets_a_code(api: httpx.AsyncClient) -> None:
    made = await api.post("/tokens", json={"role": "worker", "worker": "w1", "name": "w"})
    worker = {"Authorization": f"Bearer {made.json()['token']}"}
    assert (await api.post("/login-codes", headers=worker)).status_code == 403
    async with _browser(api) as browser:
        assert (await browser.post("/login-codes")).status_code == 401


async def test_a_user_tokens_session_sees_only_its_projects(api: httpx.AsyncClient) -> None:
    ours, theirs = await _job(api, "ours-job", "a"), await _job(api, "their-job", "b")
    cookie = await _sign_in(api, await _user(api, "alice", "a"))
    listing = await _page(api, "/ui", cookie)
    assert listing.status_code == 200
    assert "ours-job" in listing.text and "their-job" not in listing.text
    assert "alice" in listing.text
    assert (await _page(api, f"/ui/jobs/{ours}", cookie)).status_code == 200
    for path in (f"/ui/jobs/{theirs}", "/ui?project=b", f"/ui/jobs/{theirs}/log-stream"):
        refused = await _page(api, path, cookie)
        assert refused.status_code == 403, path
        assert "project &#39;b&#39;" in refused.text  # the API's reason, escaped
    admin = await _page(api, "/ui", await _sign_in(api))
    assert "ours-job" in admin.text and "their-job" in admin.text


async def test_a_user_sees_every_worker_but_only_its_projects_jobs_there(
    api: httpx.AsyncClient,
) -> None:
    registered = await api.put("/workers/w1", json={"spec": {"slots": 2}})
    assert registered.status_code == 200, registered.text
    ours, theirs = await _job(api, "ours-job", "a"), await _job(api, "their-job", "b")
    bind(api, ours, "w1")
    bind(api, theirs, "w1")
    page = (await _page(api, "/ui/workers", await _sign_in(api, await _user(api, "al", "a")))).text
    assert "w1" in page and "2/2" in page
    assert "ours-job" in page and "their-job" not in page and "1 of other projects" in page


async def test_a_revoked_tokens_session_ends(api: httpx.AsyncClient) -> None:
    await _job(api, "a", "a")
    cookie = await _sign_in(api, await _user(api, "bob", "a"))
    assert (await _page(api, "/ui", cookie)).status_code == 200
    assert (await api.delete("/tokens/bob")).status_code == 200
    assert (await _page(api, "/ui", cookie)).status_code == 401
    await _user(api, "bob", "a")  # a new token of the same label: not the session's
    assert (await _page(api, "/ui", cookie)).status_code == 401


async def test_a_live_stream_ends_with_its_session(
    api: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    await _job(api, "first", "a")
    waiting = wait_entered(monkeypatch, broker_state(api).feed.changed)
    cookie = await _sign_in(api, await _user(api, "carol", "a"))
    answered: list[httpx.Response] = []

    async def follow() -> None:
        answered.append(await _page(api, "/ui/stream/jobs", cookie))

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(follow)
            await waiting.wait()  # the stream sent the list and waits for a change
            assert (await api.delete("/tokens/carol")).status_code == 200
            await _job(api, "wakes-it", "a")
    text = answered[0].text
    assert text.startswith("event: html\n") and "first" in text and "wakes-it" not in text


async def test_filters_narrow_the_list_and_a_bad_one_is_named(api: httpx.AsyncClient) -> None:
    await _job(api, "vision-job", "a")
    labelled = job_document("labelled")
    labelled["metadata"]["labels"] = {"team": "vision"}
    assert (await api.post("/jobs", json=labelled)).status_code == 201
    cookie = await _sign_in(api)
    by_label = (await _page(api, "/ui?label=team%3Dvision", cookie)).text
    assert "labelled" in by_label and "vision-job" not in by_label
    by_project = (await _page(api, "/ui?project=a&phase=Pending", cookie)).text
    assert "vision-job" in by_project and "labelled" not in by_project
    for bad, field in (("label=%3D%3D%3D", "label"), ("phase=Sleeping", "phase")):
        refused = await _page(api, f"/ui?{bad}", cookie)
        assert refused.status_code == 422 and f"{field}:" in refused.text, refused.text
    assert (await _page(api, "/ui/jobs/0", cookie)).status_code == 422
    assert (await _page(api, "/ui/jobs/999", cookie)).status_code == 404


async def test_a_job_page_masks_secrets_and_escapes_what_users_wrote(
    api: httpx.AsyncClient,
) -> None:
    job_id = await _job(
        api, "masked", env={"API_TOKEN": "hunter2-secret", "NOTE": "<script>alert(1)</script>"}
    )
    text = (await _page(api, f"/ui/jobs/{job_id}", await _sign_in(api))).text
    assert "hunter2-secret" not in text and "API_TOKEN" in text
    assert "<script>alert(1)" not in text and "&lt;script&gt;" in text


async def test_the_log_stream_sends_the_output_then_its_end(api: httpx.AsyncClient) -> None:
    job_id = await _job(api, "talks")
    bind(api, job_id, "w1")
    await api.post(f"/jobs/{job_id}/logs", params={"offset": 0}, content=b"one\ntwo\n")
    done = await api.post(f"/jobs/{job_id}/complete", json={"worker": "w1", "exit_code": 0})
    assert done.status_code == 200, done.text
    stream = await _page(api, f"/ui/jobs/{job_id}/log-stream", await _sign_in(api))
    assert stream.headers["content-type"].startswith("text/event-stream")
    output = "id: 8\nevent: log\ndata: one\ndata: two\ndata: \n\n"  # the last line's end
    assert stream.text == output + "event: end\ndata: \n\n"


def test_a_code_expires_and_a_session_too(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path}/jobd.db")
    now = [1000.0]
    tokens = Tokens(store, ADMIN)
    sessions = Sessions(tokens, b"k" * 32, clock=lambda: now[0])
    late = sessions.mint_code(tokens.builtin)
    now[0] += CODE_TTL_S + 1
    assert sessions.redeem(late) is None
    cookie = sessions.redeem(sessions.mint_code(tokens.builtin))
    assert cookie is not None and sessions.principal(cookie) is tokens.builtin
    assert Sessions(tokens, b"x" * 32).principal(cookie) is None  # another key: forged
    now[0] += SESSION_TTL_S + 1
    assert sessions.principal(cookie) is None
    store.close()
