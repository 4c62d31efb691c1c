"""Hostile requests to a real broker: refused before they are read, within a second,
with the API's one error body, and without the broker's memory growing.
"""

from __future__ import annotations

import json
import socket
import subprocess
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import httpx
import pytest

from jobd.wire import routes
from tests.fuzz.broker import BIN, TOKEN, Broker, running_broker

FIFTY_MB = 50 * 1000 * 1000


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    with running_broker(tmp_path_factory.mktemp("hostile")) as running:
        yield running


@pytest.fixture(scope="module")
def job_id(broker: Broker) -> int:
    with broker.client() as http:
        created = http.post("/jobs", json={"spec": {"command": ["true"]}})
    assert created.status_code == 201, created.text
    return int(created.json()["metadata"]["id"])


def _error_body(response: httpx.Response) -> str:
    """The detail of the API's one error body; fails on anything else."""
    assert response.headers["content-type"].startswith("application/json"), response.text
    body = response.json()
    assert set(body) == {"detail"} and isinstance(body["detail"], str), body
    return str(body["detail"])


def _chunks(total: int, size: int = 1 << 20) -> Iterator[bytes]:
    block = b"[" * size
    for _ in range(total // size):
        yield block


def _paths(job_id: int) -> list[str]:
    return ["/apply", "/events", f"/jobs/{job_id}/logs", "/jobs"]


def test_fifty_megabytes_declared_are_refused_unread(broker: Broker, job_id: int) -> None:
    before = broker.rss_kib()
    for path in _paths(job_id):
        began = time.monotonic()
        status, text = _declare_and_send_a_little(broker.url, path, FIFTY_MB)
        assert time.monotonic() - began < 1.0, path
        assert status == 413, (path, text)
        assert "cap" in json.loads(text)["detail"]
    assert broker.rss_kib() - before < 20_000  # KiB: nothing like 50 MB was read


def test_fifty_megabytes_streamed_are_refused_at_the_cap(broker: Broker, job_id: int) -> None:
    before = broker.rss_kib()
    with broker.client() as http:
        for path in _paths(job_id):
            began = time.monotonic()
            refused = http.post(path, content=_chunks(FIFTY_MB))
            assert time.monotonic() - began < 2.0, path
            assert refused.status_code == 413, (path, refused.text)
            _error_body(refused)
    assert broker.rss_kib() - before < 60_000  # at most one /apply's cap (32 MiB) held


def test_every_route_states_its_cap_and_refusals_in_openapi(broker: Broker) -> None:
    with broker.client() as http:
        document = http.get("/openapi.json").json()
    for route in routes.ROUTES:
        if route is routes.OPENAPI:
            continue
        operation = document["paths"][route.path][route.method.lower()]
        for status in route.refusals:
            answer = operation["responses"][str(status)]
            schema = answer["content"]["application/json"]["schema"]
            assert schema == {"$ref": "#/components/schemas/ErrorBody"}, (route.path, status)
    assert document["components"]["schemas"]["ErrorBody"]["required"] == ["detail"]


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "names"),
    [
        ("PUT", "/workers/w1", {"spec": {"lease_duration_s": 1.3e244}}, 422, "lease_duration_s"),
        ("PUT", "/workers/w1", {"spec": {"lease_duration_s": 0.5}}, 422, "lease_duration_s"),
        ("PUT", "/workers/w1", {"spec": {"slots": 0}}, 422, "slots"),
        ("PUT", "/workers/w1", {"spec": {"slots": 2**64}}, 422, "slots"),
        ("PUT", "/workers/w1", {"spec": {"gpus": [4096]}}, 422, "gpus"),
        ("PUT", "/workers/w1", {"spec": {"gpus": [0, 0]}}, 422, "gpus"),
        ("PUT", "/workers/w1", {"spec": {"slots": "2"}}, 422, "slots"),
        ("POST", "/jobs", {"spec": {"command": ["x"], "priority": 10**30}}, 422, "priority"),
        ("POST", "/jobs", {"spec": {"command": ["x"], "checkpoint_grace_s": 301}}, 422, "grace"),
        ("POST", "/jobs", {"spec": {"command": ["x"], "checkpoint_grace_s": -1}}, 422, "grace"),
        ("POST", "/jobs", {"spec": {"command": ["x"], "checkpoint_grace_s": True}}, 422, "grace"),
        ("POST", "/jobs", {"spec": {"command": ["x"], "resources": {"gpus": 65}}}, 422, "gpus"),
        ("POST", "/jobs", {"spec": {"command": ["x"], "depends_on": [2**40]}}, 422, "depends_on"),
        ("POST", "/jobs", {"spec": {"command": ["x"]}, "metadata": {"id": 2**63}}, 422, "id"),
        ("POST", "/jobs", {"spec": {"command": ["x"], "depends_on": ["nope"]}}, 404, "nope"),
        ("POST", "/workers/w1/heartbeat", {"attempts": {"1": 2**40}}, 422, "attempts"),
        ("POST", "/jobs/1/complete", {"worker": "w1", "attempt": 2**53}, 422, "attempt"),
        ("POST", "/jobs/1/complete", {"worker": "w1", "signal": 2**31}, 422, "signal"),
        ("POST", "/events", {"worker": "w1", "events": [{"event": "x", "job": False}]}, 422, "job"),
    ],
)
def test_numbers_out_of_range_are_refused_naming_the_field(
    broker: Broker, method: str, path: str, body: object, status: int, names: str
) -> None:
    with broker.client() as http:
        http.put("/workers/w1", json={"spec": {}})
        refused = http.request(method, path, json=body)
    assert refused.status_code == status, refused.text
    assert names in _error_body(refused)


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_nan_and_infinity_are_refused(broker: Broker, value: str) -> None:
    body = f'{{"spec": {{"lease_duration_s": {value}}}}}'
    with broker.client() as http:
        refused = http.put("/workers/w1", content=body, headers=_json())
        held = http.get("/events", params={"timeout": value.lower()})
    assert refused.status_code == 422, refused.text
    assert held.status_code == 422 and "timeout" in _error_body(held)


def test_a_lease_in_range_and_a_float_that_holds_an_integer_are_taken(broker: Broker) -> None:
    with broker.client() as http:
        taken = http.put(
            "/workers/w2",
            content='{"spec": {"slots": 2.0, "lease_duration_s": 3600}}',
            headers=_json(),
        )
    assert taken.status_code == 200, taken.text
    assert taken.json()["worker"]["spec"]["slots"] == 2


@pytest.mark.parametrize(
    ("method", "path", "content", "status"),
    [
        ("POST", "/events", b"[" * 100_000, 422),  # FastAPI answered 400 here
        ("POST", "/jobs/1/complete", b"\xff&3F", 422),  # not UTF-8
        ("POST", "/jobs", b"{" * 5_000, 422),
        ("POST", "/apply", b'{"documents": [{"kind": {}}]}', 422),  # a 500 here
        ("POST", "/apply", b'{"documents": [{"kind": "Project", "metadata": {}}]}', 422),
        ("GET", "/jobs/2147483648", b"", 422),
        ("GET", "/workers/Not_A_Name", b"", 422),
        ("GET", "/no/such/route", b"", 404),
        ("DELETE", "/events", b"", 405),
    ],
)
def test_every_error_path_answers_the_error_body(
    broker: Broker, method: str, path: str, content: bytes, status: int
) -> None:
    with broker.client() as http:
        refused = http.request(method, path, content=content, headers=_json())
    assert refused.status_code == status, refused.text
    _error_body(refused)


def test_a_refused_method_names_every_method_of_its_path(broker: Broker) -> None:
    with broker.client() as http:
        refused = http.request("PATCH", "/events")
    assert refused.status_code == 405
    assert refused.headers["allow"] == "GET, POST"


def test_no_token_is_the_error_body_too(broker: Broker) -> None:
    refused = httpx.get(f"{broker.url}/jobs")
    assert refused.status_code == 401
    _error_body(refused)
    assert TOKEN not in refused.text


def _json() -> dict[str, str]:
    return {"content-type": "application/json"}


def _declare_and_send_a_little(url: str, path: str, length: int) -> tuple[int, str]:
    """POST declaring `length` bytes and sending only the first 64 KiB: the answer must
    come without the rest, since a broker that read on would wait for it forever."""
    where = urlsplit(url)
    with socket.create_connection((where.hostname, where.port), timeout=5) as sock:
        head = (
            f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n"
        )
        sock.sendall(head.encode() + b"[" * 65536)
        answer = b""
        while b"\r\n\r\n" not in answer or not answer.rstrip().endswith(b"}"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            answer += chunk
    status_line, _, rest = answer.partition(b"\r\n")
    return int(status_line.split()[1]), rest.partition(b"\r\n\r\n")[2].decode()


def test_a_worker_with_a_lease_the_broker_refuses_is_refused_at_start() -> None:
    started = subprocess.run(
        [str(BIN / "jobd"), "worker", "--lease", "7200"], capture_output=True, text=True, timeout=30
    )
    assert started.returncode == 2 and "--lease" in started.stderr
