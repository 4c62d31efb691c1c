"""`job` reaches an http:// broker through the standard library, and shows its tables
without rich: against a real `jobd dev`, `job get` loads none of httpx, rich, pydantic or
ruamel.yaml, nor does a refusal it says, and the standard-library client gets from the
broker what the wire's httpx client gets, refusals and all; a broker restarted between two
calls is reached again.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jobd.api.frozen import Frozen
from jobd.cli.plain_http import PlainClient
from jobd.wire import calls
from jobd.wire.client import Client
from jobd.wire.errors import ApiError, BrokerUnreachable
from tests.e2e.harness import Jobd, _free_port, _launch, _ready, manifest, start_jobd, stop_jobd

HEAVY = ("httpx", "httpcore", "rich", "pydantic", "ruamel", "sqlalchemy", "fastapi")
PROBE = """
import json, sys
from jobd.cli.job_main import main
sys.argv = ["job", *sys.argv[1:]]
try:
    main()
except SystemExit as exc:
    assert (exc.code or 0) == {code}, exc.code
with open({modules!r}, "w") as out:
    json.dump(sorted(k for k, v in sys.modules.items() if v is not None), out)
"""


@pytest.fixture(scope="module")
def jobd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Jobd]:
    running = start_jobd(tmp_path_factory.mktemp("plainhttp"))
    unrunnable = {"resources": {"gpus": 64}}  # no job runs: nothing moves under the reads
    documents = [manifest(f"plain-{i}", ["true"], **unrunnable) for i in range(3)]
    (running.root / "jobs.yaml").write_text("\n---\n".join(documents))
    running.ok("apply", "-f", str(running.root / "jobs.yaml"))
    yield running
    stop_jobd(running)


def _token(jobd: Jobd) -> str:
    return (jobd.root / "data" / "admin.token").read_text().strip()


def test_job_get_prints_its_table_loading_no_heavy_library(jobd: Jobd, tmp_path: Path) -> None:
    modules = tmp_path / "modules.json"
    probe = PROBE.format(modules=str(modules), code=0)
    shown = subprocess.run(
        [sys.executable, "-c", probe, "get"],
        env=jobd.env,
        cwd=jobd.root,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert shown == jobd.ok("get")  # the same as the installed `job` prints
    lines = shown.splitlines()
    assert lines[0].split() == ["ID", "NAME", "PHASE", "PRIO", "WORKER", "PROGRESS", "AGE"]
    assert [line.split()[1] for line in lines[1:]] == [f"default/plain-{i}" for i in range(3)]
    loaded = set(json.loads(modules.read_text()))
    assert "jobd.cli.plain_http" in loaded
    assert {m.split(".")[0] for m in loaded} & set(HEAVY) == set()


@pytest.mark.parametrize("args", [["get", "999999"], ["get", "-p", "nowhere"]])
def test_a_refusal_is_said_loading_no_heavy_library(
    jobd: Jobd, tmp_path: Path, args: list[str]
) -> None:
    # A job or project not there is the broker's 404, worded without httpx (wire/errors.py).
    modules = tmp_path / "modules.json"
    said = subprocess.run(
        [sys.executable, "-c", PROBE.format(modules=str(modules), code=1), *args],
        env=jobd.env,
        cwd=jobd.root,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stderr
    assert said.startswith("error: ") and "not" in said
    loaded = set(json.loads(modules.read_text()))
    assert {m.split(".")[0] for m in loaded} & set(HEAVY) == set()


def _both(jobd: Jobd) -> tuple[PlainClient, Client]:
    return PlainClient(jobd.url, _token(jobd)), Client(jobd.url, _token(jobd))


def test_the_standard_library_client_gets_what_httpx_gets(jobd: Jobd) -> None:
    plain, wire = _both(jobd)
    first = plain.run(calls.list_jobs(limit=1)).items[0]["metadata"]["id"]
    same: list[Any] = [
        calls.list_jobs(phase=["Pending", "Running"], selector="app!=x"),
        calls.list_jobs(name="plain-1"),
        calls.get_job(first),
        calls.list_projects(),
        calls.list_arrays(),
        calls.list_events(job=first),
        calls.read_logs(first, offset=0, follow=False, timeout=1.0),
        calls.apply([_document("plain-0")], dry_run=True, objects=True),
    ]
    with plain, wire:
        for call in same:
            assert _plain(plain.run(call)) == _plain(wire.run(call)), call.url
        for refused in (calls.get_job(10**9), calls.create_job({"kind": "Job", "spec": {}})):
            with pytest.raises(ApiError) as by_plain:
                plain.run(refused)
            with pytest.raises(ApiError) as by_httpx:
                wire.run(refused)
            assert (by_plain.value.status, by_plain.value.message) == (
                by_httpx.value.status,
                by_httpx.value.message,
            )


def _document(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "jobd/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {"command": ["true"], "resources": {"gpus": 64}},
    }


def _plain(value: Any) -> Any:
    """An answer as plain data, whatever envelope (a Frozen record) holds it."""
    if isinstance(value, Frozen):
        return {name: _plain(field) for name, field in vars(value).items()}
    return value


def test_a_broker_not_there_is_said_as_httpx_says_it() -> None:
    closed = f"http://127.0.0.1:{_free_port()}"
    with pytest.raises(BrokerUnreachable) as by_plain:
        PlainClient(closed, None).run(calls.list_jobs())
    with pytest.raises(BrokerUnreachable) as by_httpx, Client(closed, None) as wire:
        wire.run(calls.list_jobs())
    assert by_plain.value.message == by_httpx.value.message
    assert "cannot reach the jobd broker" in by_plain.value.message


def test_a_host_name_no_resolver_takes_is_said_as_unreachable() -> None:
    # A label of 64 characters: the `idna` codec refused it with a UnicodeError (a
    # traceback) while a str host name was resolved; as the ASCII bytes it is, the
    # resolver refuses it, and it is said as any broker not there.
    server = f"http://{'a' * 64}.example:8765"
    with pytest.raises(BrokerUnreachable) as caught:
        PlainClient(server, None).run(calls.list_jobs())
    assert caught.value.message.startswith(f"cannot reach the jobd broker at {server} ")


def test_a_broker_restarted_between_two_calls_is_reached_again(tmp_path: Path) -> None:
    first = start_jobd(tmp_path)
    port = int(first.url.rsplit(":", 1)[1])
    plain = PlainClient(first.url, _token(first))
    before = plain.run(calls.list_workers())
    stop_jobd(first)  # the kept-alive connection is closed by the broker's end
    again = _launch(tmp_path, port, (), {})
    try:
        assert _ready(again)
        assert [w["metadata"]["name"] for w in plain.run(calls.list_workers())] == [
            w["metadata"]["name"] for w in before
        ]
    finally:
        plain.close()
        stop_jobd(again)
