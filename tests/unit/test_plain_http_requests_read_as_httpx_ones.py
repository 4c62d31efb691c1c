"""The `job` command's standard-library client (jobd/cli/plain_http.py) asks the broker
exactly what the wire's httpx client asks: the same path, query and body for each call.
(What the broker answers both is compared against a real `jobd dev`, in
tests/e2e/test_job_speaks_plain_http_with_the_standard_library.py.)"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

import httpx
import pytest

from jobd.cli.broker_client import JobdClient
from jobd.cli.plain_http import PlainClient, plain_http_serves
from jobd.wire import calls, plain_http
from jobd.wire import client as wire_client
from jobd.wire.calls import Call

SERVER = "http://127.0.0.1:9/prefix"
CALLS: list[Call[Any]] = [
    calls.list_jobs(project="p", phase=["Running", "Pending"], selector="team=a b,x!=y"),
    calls.list_jobs(name="résumé", limit=5),
    calls.get_job(7),
    calls.get_project("has space"),
    calls.apply(
        [{"kind": "Job", "metadata": {"name": "ü"}, "spec": {}}], dry_run=True, objects=False
    ),
    calls.create_job({"apiVersion": "jobd/v1", "spec": {"command": ["echo", "ünï"]}}),
    calls.read_logs(3, offset=10, follow=True, timeout=2.5, since_s=1.5),
    calls.list_events(job=3, from_now=True, follow=False),
    calls.watch(12, kind="Job", phase=["Running"], timeout=30.0),
    calls.resume_job(4, from_scratch=True),
    calls.preempt_blockers(5, dry_run=False),
    calls.append_logs(6, 0, b"raw \x00 bytes"),
]


def _httpx_request(call: Call[Any]) -> httpx.Request:
    sender = wire_client.Client(SERVER, "t0ken", transport=httpx.MockTransport(lambda r: None))
    with sender._http as http:  # the request httpx would send; nothing is sent
        return http.build_request(**sender._request(call))


@pytest.mark.parametrize("call", CALLS, ids=lambda c: f"{c.method} {c.route.path}")
def test_each_call_is_the_same_request_as_httpx_makes(call: Call[Any]) -> None:
    expected = _httpx_request(call)
    path, _, query = plain_http.target(urlsplit(SERVER).path.rstrip("/"), call).partition("?")
    assert unquote(path) == unquote(expected.url.path)
    assert parse_qsl(query, keep_blank_values=True) == parse_qsl(
        expected.url.query.decode(), keep_blank_values=True
    )
    body, headers = plain_http.request_body(call)
    assert (body or b"") == expected.content
    assert headers.get("Content-Type") == expected.headers.get("Content-Type")


def test_the_token_and_user_agent_are_sent_and_a_bad_token_is_refused() -> None:
    headers = PlainClient(SERVER, " t0ken\n").headers
    assert headers["Authorization"] == "Bearer t0ken"
    assert headers["User-Agent"] == "jobd-client"
    # The protocol every client states (wire/protocol.py), as the wire's httpx client does.
    assert (
        headers["X-Jobd-Protocol"]
        == "1"
        == wire_client.Client(SERVER, None).headers["X-Jobd-Protocol"]
    )
    with pytest.raises(ValueError, match="the token given has a character"):
        PlainClient(SERVER, "two words")


def test_http_goes_plain_and_https_or_a_proxy_goes_through_httpx(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    assert plain_http_serves("http://127.0.0.1:8765")
    assert not plain_http_serves("https://broker.example:8765")

    def sender_of(url: str, **given: Any) -> object:  # the client that broker is asked with
        return JobdClient(url, **given)._sender.client(url)

    assert isinstance(sender_of("http://127.0.0.1:9"), PlainClient)
    assert isinstance(sender_of("https://127.0.0.1:9"), wire_client.Client)
    fake = httpx.MockTransport(lambda r: httpx.Response(200))
    assert isinstance(sender_of("http://127.0.0.1:9", transport=fake), wire_client.Client)
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.example:3128")
    assert not plain_http_serves("http://127.0.0.1:8765")


def test_a_held_call_waits_as_long_as_the_wire_client_lets_it() -> None:
    assert plain_http.HOLD_MARGIN_S == wire_client.HOLD_MARGIN_S
    assert urlsplit(PlainClient(SERVER, None).server).path == "/prefix"
