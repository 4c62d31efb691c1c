"""Record what a real `jobd worker` sends a broker, as the fixture of the oldest agent.

    python -m tests.integration.recorded.record_agent_payloads OUT.json

Starts a real `jobd broker`, a recording proxy in front of it, and a real `jobd worker`
through the proxy; submits one job (output, 6 s, exit code 3), waits for its end and a
heartbeat, stops both,
and writes each request of a worker route (method, target, X-Jobd-Protocol, JSON body) to
OUT.json. Run it when PROTOCOL goes up, into a new file beside the old ones: the old files
stay, replayed by tests/integration/test_old_agents_payloads_are_accepted.py for as long
as the broker accepts their version.
"""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from jobd.wire.protocol import PROTOCOL_HEADER
from jobd.wire.routes import WORKER_PAYLOADS, find_route

BIN = Path(sys.executable).parent


def _recording_proxy(broker_port: int, into: list[dict[str, Any]]) -> ThreadingHTTPServer:
    class Forward(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _any(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            path = self.path.split("?", 1)[0]
            if find_route(self.command, path) in WORKER_PAYLOADS:
                into.append(
                    {
                        "method": self.command,
                        "target": self.path,
                        "protocol": self.headers.get(PROTOCOL_HEADER),
                        "content_type": self.headers.get("Content-Type"),
                        "body": body.decode("latin-1"),
                    }
                )
            upstream = http.client.HTTPConnection("127.0.0.1", broker_port, timeout=120)
            upstream.request(self.command, self.path, body or None, dict(self.headers))
            answer = upstream.getresponse()
            data = answer.read()
            self.send_response(answer.status)
            for name, value in answer.getheaders():
                if name.lower() not in ("content-length", "connection", "date", "server"):
                    self.send_header(name, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_PUT = do_POST = do_DELETE = _any

        def log_message(self, *_args: Any) -> None:
            pass

    return ThreadingHTTPServer(("127.0.0.1", 0), Forward)


def _wait(ready: Any, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            found = ready()
            if found:
                return found
        except OSError:
            pass
        time.sleep(0.1)
    raise RuntimeError("timed out")


def _api(port: int, token: str, method: str, path: str, body: Any = None) -> Any:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    conn.request(method, path, None if body is None else json.dumps(body), headers)
    answer = conn.getresponse()
    return json.loads(answer.read() or b"null")


def record(out: Path) -> None:
    root = Path(tempfile.mkdtemp(prefix="jobd-record-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBD_")}
    env |= {"JOBD_DATA_DIR": str(root / "data"), "JOBD_LOG_DIR": str(root / "logs"),
            "JOBD_SOCKET": "none", "JOBD_WORKER_CHECKPOINT_ROOT": str(root / "ckpt")}  # fmt: skip
    broker = subprocess.Popen([BIN / "jobd", "broker", "--port", "18931"], env=env, cwd=root)
    recorded: list[dict[str, Any]] = []
    proxy = _recording_proxy(18931, recorded)
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{proxy.server_address[1]}"
    worker = None
    try:
        token = _wait(lambda: (root / "data" / "admin.token").read_text().strip())
        worker = subprocess.Popen(
            [BIN / "jobd", "worker", "--server", url, "--name", "w1", "--gpus", "none",
             "--state-dir", str(root / "worker")], env=env | {"JOBD_TOKEN": token}, cwd=root,
        )  # fmt: skip
        _wait(lambda: _api(18931, token, "GET", "/workers")["items"])
        script = "import time; print('hello', flush=True); time.sleep(6); raise SystemExit(3)"
        command = [sys.executable, "-c", script]  # a heartbeat comes while it runs
        doc = {"apiVersion": "jobd/v1", "kind": "Job", "metadata": {"name": "recorded"},
               "spec": {"command": command, "cwd": str(root)}}  # fmt: skip
        job = _api(18931, token, "POST", "/jobs", doc)["metadata"]["id"]
        _wait(lambda: _api(18931, token, "GET", f"/jobs/{job}")["status"]["phase"] == "Failed")
        _wait(lambda: sum(r["target"].endswith("/heartbeat") for r in recorded) >= 2)
    finally:
        for process in (worker, broker):
            if process is not None:
                process.terminate()
                process.wait(10)
        proxy.shutdown()
    heartbeats = [r for r in recorded if r["target"].endswith("/heartbeat")]
    first_two = {id(r) for r in heartbeats[:2]}
    kept = [r for r in recorded if not r["target"].endswith("/heartbeat") or id(r) in first_two]
    _anonymise(kept[0])
    out.write_text(json.dumps(kept, indent=1) + "\n")


def _anonymise(registration: dict[str, Any]) -> None:
    """The recording host's user accounts, which the registration lists, cut to two."""
    body = json.loads(registration["body"])
    if body.get("users") is not None:
        body["users"] = ["nobody", "root"]
    registration["body"] = json.dumps(body, separators=(",", ":"))


if __name__ == "__main__":
    record(Path(sys.argv[1]))
