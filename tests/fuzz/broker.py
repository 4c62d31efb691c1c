"""A real `jobd broker` process on a free port, with a temporary data dir and known token."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

BIN = Path(sys.executable).parent
TOKEN = "fuzz-" + "t" * 40


@dataclass
class Broker:
    url: str
    process: subprocess.Popen[bytes]

    def client(self) -> httpx.Client:
        return httpx.Client(
            base_url=self.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10
        )

    def rss_kib(self) -> int:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise AssertionError("no VmRSS")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def running_broker(root: Path) -> Iterator[Broker]:
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBD_")}
    argv = [str(BIN / "jobd"), "broker", "--port", str(port), "--token", TOKEN]
    argv += ["--data-dir", str(root / "data"), "--log-dir", str(root / "logs")]
    log = (root / "broker.log").open("wb")
    process = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
    broker = Broker(f"http://127.0.0.1:{port}", process)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{broker.url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert process.poll() is None, (root / "broker.log").read_text()
            assert time.monotonic() < deadline, "the broker did not start"
            time.sleep(0.1)
        yield broker
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()
