"""The agent's plain client (jobd/wire/plain_async.py) frames exactly the request the
wire's httpx client makes for each call the agent sends: the same method, path, query,
body and the headers that matter (token, user agent, content type and length, host).
(What the broker answers both is compared against a real `jobd dev`, in
tests/e2e/test_the_agent_speaks_h11_without_httpx.py.) An https:// broker or a proxy in
the environment goes through httpx."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

import h11
import httpx
import pytest

from jobd.wire import calls
from jobd.wire import client as wire_client
from jobd.wire.calls import Call
from jobd.wire.models import Heartbeat, Registration, ReportBatch, WorkerEvent, WorkerEvents
from jobd.wire.plain_async import PlainAsyncClient, open_async_client
from jobd.wire.reports import batched

SERVER = "http://127.0.0.1:9/prefix"
_REPORTS = [
    batched(7, "started", {"checkpoint_dir": "/c/7/"}, attempt=1),
    batched(8, "complete", {"exit_code": 0}),
]
CALLS: list[Call[Any]] = [
    calls.register_worker("w1", Registration.model_validate({"hostname": "h", "spec": {}})),
    calls.heartbeat("w1", Heartbeat(instance="abc", epoch=3, running=[7], attempts={7: 1})),
    calls.send_reports("w1", ReportBatch(reports=_REPORTS, events=[])),
    calls.ingest_events(WorkerEvents(worker="w1", events=[WorkerEvent(event="é", job=7)])),
    calls.append_logs(6, 0, b"raw \x00 bytes"),
    calls.list_jobs(worker="w1"),
    calls.list_jobs(phase=["Running", "Pending"], selector="team=a b,x!=y"),
    calls.watch(12, kind="Job", worker="w1", timeout=30.0),
    calls.get_job(7),
    calls.get_project("has space"),
    calls.create_job({"apiVersion": "jobd/v1", "spec": {"command": ["echo", "ünï"]}}),
    calls.cancel_job(3),
]
_COMPARED = (
    "host",
    "authorization",
    "user-agent",
    "content-type",
    "content-length",
    "accept",
    "x-jobd-protocol",  # wire/protocol.py: every request of every client states it
)


def _httpx_request(call: Call[Any]) -> httpx.Request:
    sender = wire_client.Client(
        SERVER, "t0ken", transport=httpx.MockTransport(lambda r: None), user_agent="jobd-worker"
    )
    with sender._http as http:  # the request httpx would send; nothing is sent
        return http.build_request(**sender._request(call))


def _headers(pairs: Any) -> dict[str, str]:
    return {k.decode().lower(): v.decode() for k, v in pairs if k.decode().lower() in _COMPARED}


@pytest.mark.parametrize("call", CALLS, ids=lambda c: f"{c.method} {c.route.path}")
def test_each_call_is_the_same_request_as_httpx_makes(call: Call[Any]) -> None:
    expected = _httpx_request(call)
    head, body = PlainAsyncClient(SERVER, "t0ken", user_agent="jobd-worker")._request(call)
    assert head.method.decode() == expected.method
    path, _, query = head.target.decode().partition("?")
    assert unquote(path) == unquote(expected.url.path)
    assert parse_qsl(query, keep_blank_values=True) == parse_qsl(
        expected.url.query.decode(), keep_blank_values=True
    )
    assert (body or b"") == expected.content
    assert _headers(head.headers) == _headers(expected.headers.raw)
    assert _headers(head.headers)["x-jobd-protocol"] == "1"
    # h11 frames it, and would refuse a request it could not: the bytes on the wire.
    wire = h11.Connection(h11.CLIENT)
    sent = wire.send(head) or b""
    assert sent.startswith(f"{expected.method} {head.target.decode()} HTTP/1.1\r\n".encode())


def test_the_token_is_checked_and_the_address_must_be_plain_http() -> None:
    with pytest.raises(ValueError, match="the token given has a character"):
        PlainAsyncClient(SERVER, "two words")
    with pytest.raises(ValueError, match="must start with http://"):
        PlainAsyncClient("https://broker.example", None)
    head, _ = PlainAsyncClient(SERVER, None)._request(calls.get_job(1))
    assert "authorization" not in _headers(head.headers)


def test_http_goes_plain_and_https_or_a_proxy_goes_through_httpx(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)

    def client_of(url: str) -> object:  # the client each broker of the list is asked with
        return open_async_client(url, None).client(url)

    assert isinstance(client_of("http://127.0.0.1:9"), PlainAsyncClient)
    assert isinstance(client_of("https://127.0.0.1:9"), wire_client.AsyncClient)
    assert isinstance(client_of("unix:///run/jobd/jobd.sock"), wire_client.AsyncClient)
    monkeypatch.setenv("ALL_PROXY", "http://proxy.example:3128")
    assert isinstance(client_of("http://127.0.0.1:9"), wire_client.AsyncClient)
    assert urlsplit(SERVER).path == "/prefix"
