"""A worker's advertised address (issue 25): `--advertise-address` or, by default, the
local address of its route to the broker; refused unless an IP address or a host name, on
the command line (naming the flag) and at registration (422 naming the field, nothing
stored); kept in `status.address` and shown by `job workers -o wide`."""

from __future__ import annotations

import json
import socket
import subprocess
from pathlib import Path

import httpx
import pytest

from jobd.api.addresses import check_address
from jobd.cli.render import workers_table
from jobd.worker.address import default_address, route_source
from tests.e2e.harness import BIN, Lab

HOSTILE = [
    "",
    "a b",
    "10.0.0.1:29500",
    "http://gpu1",
    "gpu1;rm -rf /",
    "127.0.0.2,127.0.0.3",
    "-gpu1",
    "10.0.0.300",
    "0.0.0.0",
    "::",
    "224.0.0.1",
    "x" * 254,
    "gpu\n1",
]
FINE = ["127.0.0.2", "10.1.2.3", "::1", "fe80::1", "gpu1", "gpu-1.lab.example.org"]


@pytest.mark.parametrize("address", HOSTILE)
def test_a_hostile_address_is_refused(address: str) -> None:
    with pytest.raises(ValueError, match=r"address|host name|dialled|IP"):
        check_address(address)


@pytest.mark.parametrize("address", FINE)
def test_an_ip_address_or_host_name_is_taken_as_given(address: str) -> None:
    assert check_address(address) == address


def test_the_default_is_the_source_of_the_route_to_the_broker() -> None:
    assert route_source("http://127.0.0.1:8765") == "127.0.0.1"
    # A list of brokers: the first one reachable says; a Unix socket says nothing.
    assert default_address("unix:///run/jobd/jobd.sock,http://127.0.0.1:1") == "127.0.0.1"
    assert route_source("unix:///run/jobd/jobd.sock") is None
    assert route_source("http://no-such-host.invalid:8765") is None
    assert default_address("unix:///run/jobd/jobd.sock") == socket.gethostname()


@pytest.mark.parametrize("address", ["gpu1;reboot", "10.0.0.1:29500", "0.0.0.0"])
def test_jobd_worker_refuses_it_naming_the_flag(address: str) -> None:
    done = subprocess.run(
        [str(BIN / "jobd"), "worker", "--advertise-address", address],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "--advertise-address" in done.stderr


@pytest.mark.anyio
@pytest.mark.parametrize("address", ["gpu1;reboot", "1.2.3.4:80", "0.0.0.0", "a,b"])
async def test_a_registration_with_a_hostile_address_is_422_and_stores_nothing(
    api: httpx.AsyncClient, address: str
) -> None:
    body = {"spec": {"slots": 1}, "hostname": "h", "runner": "r", "address": address}
    registered = await api.put("/workers/w9", json=body)
    assert registered.status_code == 422 and "address" in registered.json()["detail"]
    assert (await api.get("/workers")).json()["items"] == []


@pytest.mark.anyio
async def test_the_registered_address_is_the_workers_and_job_workers_shows_it(
    api: httpx.AsyncClient,
) -> None:
    body = {"spec": {"slots": 1}, "hostname": "h", "runner": "r", "address": "127.0.0.2"}
    registered = await api.put("/workers/w9", json=body)
    assert registered.status_code == 200, registered.text
    assert registered.json()["worker"]["status"]["address"] == "127.0.0.2"
    beat = await api.post("/workers/w9/heartbeat", json={"running": []})
    assert beat.json()["worker"]["status"]["address"] == "127.0.0.2", "a renewal keeps it"
    workers = (await api.get("/workers")).json()["items"]
    wide = workers_table(workers, [], wide=True)
    assert "ADDRESS" in wide.headers and "127.0.0.2" in wide.rows[0]
    assert "ADDRESS" not in workers_table(workers, []).headers


def test_real_workers_register_the_address_given_or_their_route_to_the_broker(
    tmp_path: Path,
) -> None:
    lab = Lab(tmp_path)
    try:
        for name, flags in (("given", ["--advertise-address", "127.0.0.3"]), ("found", [])):
            lab.start(
                name, "worker", "--name", name, "--gpus", "none",
                "--state-dir", str(tmp_path / "data" / "worker" / name), *flags,
            )  # fmt: skip
        lab.wait_workers(2)
        listed = json.loads(lab.job("workers", "-o", "json").stdout)
        addresses = {w["metadata"]["name"]: w["status"]["address"] for w in listed}
        assert addresses == {"given": "127.0.0.3", "found": "127.0.0.1"}  # the broker's route
        header, *rows = lab.job("workers", "-o", "wide").stdout.splitlines()
        assert "ADDRESS" in header.split()
        shown = {row.split()[0]: row.split() for row in rows}
        assert "127.0.0.3" in shown["given"] and "127.0.0.1" in shown["found"]
    finally:
        lab.close()
