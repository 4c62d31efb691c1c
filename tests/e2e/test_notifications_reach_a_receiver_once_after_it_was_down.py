"""Notifications reach a real HTTP receiver once each, signed, even after it was down.

A real `jobd dev` with a broker-wide `--webhook` (Succeeded and Failed, signed with
`--webhook-secret`) and jobs submitted with `job submit --notify URL` (a target of their
own, unsigned, every end). A receiver started by the test on a real socket gets exactly
the notifications asked for; stopped for ten seconds, it is reported down in /metrics and
in `job describe`, and gets what it missed once it is back, each once (by its
Idempotency-Key), with a valid HMAC. A receiver that takes connections and never answers
leaves jobs running and ending as fast as ever. Webhook URLs are never shown.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import Jobd, start_jobd, stop_jobd

SECRET = "s3cret-for-the-test"
DOWN_S = 10.0


class Receiver:
    """A webhook receiver on a fixed port that can be stopped and started again."""

    def __init__(self) -> None:
        self.port = _free_port()
        self.got: list[dict[str, Any]] = []
        self._server: ThreadingHTTPServer | None = None

    def start(self) -> None:
        got = self.got

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                got.append({"path": self.path, "headers": dict(self.headers), "body": body})
                self.send_response(204)
                self.end_headers()

            def log_message(self, *_args: Any) -> None:
                pass

        ThreadingHTTPServer.allow_reuse_address = True
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        assert self._server is not None
        self._server.shutdown()
        self._server.server_close()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def wait_for(self, count: int, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while len(self.got) < count:
            assert time.monotonic() < deadline, f"{len(self.got)} of {count}: {self.summary()}"
            time.sleep(0.05)

    def summary(self) -> list[tuple[str, int, str]]:
        return sorted(
            (g["path"], json.loads(g["body"])["job"]["id"], json.loads(g["body"])["phase"])
            for g in self.got
        )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    r.start()
    yield r
    if r._server is not None:
        r._server.server_close()


def _jobd(tmp_path: Path, hook: str, *flags: str) -> Jobd:
    return start_jobd(
        tmp_path,
        "--webhook-events",
        "Succeeded,Failed",
        "--webhook-backoff",
        "0.2",
        "--webhook-backoff-max",
        "1",
        *flags,
        env_extra={"JOBD_WEBHOOK": hook, "JOBD_WEBHOOK_SECRET": SECRET},
    )


def _submit(jobd: Jobd, notify: str, *command: str) -> int:
    out = jobd.ok("submit", "--notify", notify, "-o", "json", "--", *command)
    return int(json.loads(out)["metadata"]["id"])


def _metric(jobd: Jobd, name: str, sink: str) -> float:
    with jobd.api() as api:
        text = api.get("/metrics").text
    line = next(li for li in text.splitlines() if li.startswith(f'{name}{{sink="{sink}"}}'))
    return float(line.rsplit(" ", 1)[1])


def test_each_notification_arrives_once_signed_after_the_receiver_was_down(
    tmp_path: Path, receiver: Receiver
) -> None:
    jobd = _jobd(tmp_path, receiver.url("/hook"))
    try:
        first = _submit(jobd, receiver.url("/job"), "true")
        jobd.wait_phase(first, "Succeeded")
        receiver.wait_for(2)  # the broker's sink and the job's own target
        assert receiver.summary() == [("/hook", first, "Succeeded"), ("/job", first, "Succeeded")]

        receiver.stop()
        second = _submit(jobd, receiver.url("/job"), "false")
        jobd.wait_phase(second, "Failed")
        time.sleep(DOWN_S)  # the receiver is down this long: tries fail, back off, retry
        assert _metric(jobd, "jobd_notify_sinks_down", "webhook-0") == 1
        assert _metric(jobd, "jobd_notify_failures_total", "webhook-0") >= 2
        described = jobd.ok("describe", str(second))
        assert "notify_failed" in described and "127.0.0.1" not in described

        receiver.start()
        receiver.wait_for(4)
        time.sleep(1.5)  # nothing more comes: no duplicate
        assert receiver.summary() == [
            ("/hook", first, "Succeeded"),
            ("/hook", second, "Failed"),
            ("/job", first, "Succeeded"),
            ("/job", second, "Failed"),
        ]
        keys = [g["headers"]["Idempotency-Key"] for g in receiver.got]
        assert len(set(keys)) == 4
        for got in receiver.got:
            signature = got["headers"].get("X-Jobd-Signature")
            if got["path"] == "/hook":  # signed with the broker's secret
                expected = hmac.new(SECRET.encode(), got["body"], hashlib.sha256).hexdigest()
                assert signature == f"sha256={expected}"
            else:  # the job's own target has no secret of its own: the broker's signs it
                assert signature is not None
        assert _metric(jobd, "jobd_notify_sinks_down", "webhook-0") == 0
        assert "notify_delivered" in jobd.ok("describe", str(second))
        shown = jobd.get(second)["spec"]["notify"]
        assert shown == [{**shown[0], "url": "***"}]
        assert receiver.url("") not in (tmp_path / "logs" / "events.jsonl").read_text()
    finally:
        stop_jobd(jobd)


def test_a_receiver_that_never_answers_holds_up_no_job(tmp_path: Path) -> None:
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(1024)  # connections are taken by the kernel, and never answered
    hook = f"http://127.0.0.1:{silent.getsockname()[1]}/hook"
    # A request held for 300 s: were a job's transitions waiting on it, no job would end
    # within the deadlines below (generous, for a loaded machine; not a timing).
    jobd = _jobd(tmp_path, hook, "--webhook-timeout", "300", "--slots", "4")
    try:
        ids = [_submit(jobd, hook, "true") for _ in range(12)]
        for job_id in ids:
            jobd.wait_phase(job_id, "Succeeded", timeout=120)
        with jobd.api() as api:
            assert api.get("/healthz", timeout=2).status_code == 200
        assert _metric(jobd, "jobd_notify_queued", "webhook-0") >= 1
        assert _metric(jobd, "jobd_notify_delivered_total", "webhook-0") == 0
    finally:
        stop_jobd(jobd)
        silent.close()
