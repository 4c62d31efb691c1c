"""A real `jobd worker` given an https:// broker registers and runs a job through TLS.

An agent of plain http:// brokers loads no TLS library (daemon/lazy_ssl.py); this is the
other side: with an https:// address it loads ssl at start and speaks TLS through httpx,
checking the broker's certificate against SSL_CERT_FILE. The broker serves plain HTTP;
TLS ends in a small forwarding proxy in this test, with a self-signed certificate for
127.0.0.1 made by the `openssl` command.
"""

from __future__ import annotations

import shutil
import ssl
import subprocess
import sys
from pathlib import Path

import anyio
import anyio.abc
import pytest
from anyio.streams.tls import TLSListener

from jobd.bench.harness import running_broker

pytestmark = pytest.mark.anyio


def _self_signed(root: Path) -> tuple[Path, Path]:
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command to make a certificate")
    cert, key = root / "cert.pem", root / "key.pem"
    made = ["-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1"]
    command = ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", *made]
    subprocess.run(
        [*command, "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True
    )
    return cert, key


async def _pump(source: anyio.abc.ByteStream, sink: anyio.abc.ByteStream) -> None:
    try:
        async for chunk in source:
            await sink.send(chunk)
    except (anyio.BrokenResourceError, anyio.ClosedResourceError, ssl.SSLError, OSError):
        pass
    finally:
        await sink.aclose()


async def _tls_proxy(listener: TLSListener, port: int) -> None:
    async def forward(client: anyio.abc.ByteStream) -> None:
        broker = await anyio.connect_tcp("127.0.0.1", port)
        async with client, broker, anyio.create_task_group() as tg:
            tg.start_soon(_pump, client, broker)
            await _pump(broker, client)

    await listener.serve(forward)


async def test_a_worker_runs_a_job_through_an_https_broker(tmp_path: Path) -> None:
    cert, key = _self_signed(tmp_path)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    tcp = await anyio.create_tcp_listener(local_host="127.0.0.1")
    tls_port = tcp.extra(anyio.abc.SocketAttribute.local_port)
    listener = TLSListener(tcp, context, standard_compatible=False)
    async with (
        running_broker(tmp_path, "broker", slots=1) as (broker, http),
        anyio.create_task_group() as tg,
    ):
        tg.start_soon(_tls_proxy, listener, broker.port)
        env = broker._env() | {
            "JOBD_URL": f"https://127.0.0.1:{tls_port}",
            "SSL_CERT_FILE": str(cert),
            "JOBD_SOCKET": "none",
        }
        with (tmp_path / "worker.log").open("wb") as log:
            broker.worker_proc = subprocess.Popen(
                [sys.executable, "-m", "jobd", "worker"],
                env=env,
                cwd=tmp_path,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        document = {"spec": {"command": ["true"], "cwd": str(tmp_path)}}
        created = await http.post("/jobs", json=document)
        assert created.status_code == 201, created.text
        job_id = created.json()["metadata"]["id"]
        with anyio.fail_after(30):
            while (await http.get(f"/jobs/{job_id}")).json()["status"]["phase"] not in (
                "Succeeded",
                "Failed",
            ):
                await anyio.sleep(0.05)
        status = (await http.get(f"/jobs/{job_id}")).json()["status"]
        assert (status["phase"], status["exit_code"]) == ("Succeeded", 0)
        assert broker.worker_proc.poll() is None
        tg.cancel_scope.cancel()
    said = (tmp_path / "worker.log").read_text(errors="replace")
    assert "worker_registered" in said
