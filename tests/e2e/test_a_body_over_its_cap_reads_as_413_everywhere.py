"""A body over its route's cap reads as 413 to clients that send it whole before reading.

Python's urllib (and `requests`) write the entire body, then read the answer. A broker
that answered and closed at once left the rest unread, and the kernel's RST cut the
client's write: a connection reset, never the 413. The broker now reads and drops the
rest (bounded, as nginx's lingering close) before it closes (broker/http/bodylimit.py).
"""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request
from urllib.parse import urlsplit

import pytest

from jobd.broker.http.bodylimit import LINGER_IDLE_S
from jobd.wire import routes
from tests.e2e.harness import Jobd


def _post(jobd: Jobd, path: str, body: bytes, headers: dict[str, str]) -> urllib.error.HTTPError:
    token = (jobd.root / "data" / "admin.token").read_text().strip()
    request = urllib.request.Request(
        jobd.url + path,
        data=body,
        method="POST",
        headers={"Authorization": f"Bearer {token}", **headers},
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=30)
    return refused.value


@pytest.mark.parametrize("size", [routes.ONE_DOCUMENT + 1, 40 * routes.ONE_DOCUMENT])
def test_urllib_reads_413_for_a_job_over_the_cap(jobd: Jobd, size: int) -> None:
    document = {"spec": {"command": ["true"], "env": {"BIG": "x" * size}}}
    body = json.dumps(document).encode()
    refused = _post(jobd, "/jobs", body, {"Content-Type": "application/json"})
    assert refused.code == 413
    assert "cap" in json.loads(refused.read())["detail"]


def test_urllib_reads_413_for_a_chunked_body_over_the_cap(jobd: Jobd) -> None:
    chunks = (b"[" * 65536 for _ in range(40 * routes.ONE_DOCUMENT // 65536))
    request_headers = {"Content-Type": "application/json", "Transfer-Encoding": "chunked"}
    token = (jobd.root / "data" / "admin.token").read_text().strip()
    request = urllib.request.Request(
        jobd.url + "/jobs",
        data=chunks,
        method="POST",
        headers={"Authorization": f"Bearer {token}", **request_headers},
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=30)
    assert refused.value.code == 413


def test_the_broker_still_serves_after_refusing(jobd: Jobd) -> None:
    body = b"[" * (2 * routes.ONE_DOCUMENT)
    assert _post(jobd, "/jobs", body, {"Content-Type": "application/json"}).code == 413
    assert jobd.ok("get", "-o", "json") is not None


def test_a_client_waiting_for_100_continue_gets_413_and_the_close_at_once(jobd: Jobd) -> None:
    """curl's way with a large body: it sends the head, then waits for `100 Continue`.
    The 413 comes instead, no `100 Continue` after it, and the broker closes at once
    (nothing of the body is coming to linger for)."""
    token = (jobd.root / "data" / "admin.token").read_text().strip()
    where = urlsplit(jobd.url)
    head = (
        f"POST /jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {50 * routes.ONE_DOCUMENT}\r\n"
        "Expect: 100-continue\r\n\r\n"
    )
    with socket.create_connection((where.hostname, where.port), timeout=5) as sock:
        sock.sendall(head.encode())
        began, answer = time.monotonic(), b""
        while chunk := sock.recv(65536):
            answer += chunk
        closed_after = time.monotonic() - began
    assert answer.startswith(b"HTTP/1.1 413 ") and b"100 Continue" not in answer
    assert closed_after < LINGER_IDLE_S  # not held for the linger (serial: tests/conftest.py)
