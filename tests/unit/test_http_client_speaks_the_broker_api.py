"""broker_client against a scripted broker (httpx.MockTransport): errors, auth, config, watch."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from jobd.cli.broker_client import (
    ApiError,
    BrokerUnreachable,
    JobdClient,
    data_dir,
    default_server,
    default_token,
)


def client_for(handler: Any, token: str | None = None) -> JobdClient:
    return JobdClient("http://broker:8765", token, transport=httpx.MockTransport(handler))


def job(id_: int, rv: int, phase: str = "Running", name: str | None = None) -> dict[str, Any]:
    meta = {"id": id_, "name": name or f"j{id_}", "project": "p", "resource_version": rv}
    return {"kind": "Job", "metadata": meta, "spec": {"command": ["x"]}, "status": {"phase": phase}}


# -- errors and auth -------------------------------------------------------------------------


def test_an_error_carries_status_and_the_bodys_detail() -> None:
    client = client_for(lambda r: httpx.Response(404, json={"detail": "job 99 not found"}))

    with pytest.raises(ApiError) as caught:
        client.get_job(99)

    assert (caught.value.status, caught.value.message) == (404, "job 99 not found")


def test_a_validation_error_list_becomes_one_sentence() -> None:
    detail = [{"loc": ["body", "spec", "priority"], "msg": "Input should be >= 0"}]
    client = client_for(lambda r: httpx.Response(422, json={"detail": detail}))

    with pytest.raises(ApiError, match=r"^spec\.priority: Input should be >= 0$"):
        client.create_job({})


def test_an_error_without_json_still_says_something() -> None:
    client = client_for(lambda r: httpx.Response(502, text="<html>bad gateway</html>"))

    with pytest.raises(ApiError, match="the broker answered 502 Bad Gateway"):
        client.list_workers()


def test_an_unreachable_broker_is_a_connection_error() -> None:
    client = JobdClient("http://127.0.0.1:9")

    with pytest.raises(ConnectionError) as caught:
        client.list_jobs()

    assert isinstance(caught.value, BrokerUnreachable)
    assert str(caught.value) == (
        "cannot reach the jobd broker at http://127.0.0.1:9 (is `jobd dev` running?)"
    )


@pytest.mark.parametrize(("token", "header"), [("s3cret", "Bearer s3cret"), (None, None)])
def test_the_token_is_sent_as_a_bearer(token: str | None, header: str | None) -> None:
    seen: list[str | None] = []

    def broker(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("Authorization"))
        return httpx.Response(200, json={"items": []})

    client_for(broker, token).list_workers()

    assert seen == [header]


def test_query_parameters_leave_out_what_was_not_said() -> None:
    seen: list[httpx.URL] = []

    def broker(request: httpx.Request) -> httpx.Response:
        seen.append(request.url)
        return httpx.Response(200, json={"items": [], "revision": 4})

    listing = client_for(broker).list_jobs(project="p", phase=["Pending", "Running"])

    assert listing.revision == 4
    assert seen[0].params.multi_items() == [
        ("project", "p"),
        ("phase", "Pending"),
        ("phase", "Running"),
    ]


def test_a_bad_server_address_is_refused() -> None:
    with pytest.raises(ValueError, match="must start with http"):
        JobdClient("broker:8765")


# -- configuration ---------------------------------------------------------------------------


def test_server_defaults_and_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JOBD_URL", raising=False)
    assert default_server() == "http://127.0.0.1:8765"
    monkeypatch.setenv("JOBD_URL", "http://gpu-box:9000")
    assert default_server() == "http://gpu-box:9000"


def test_data_dir_resolution(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("JOBD_DATA_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_DATA_HOME", "")
    assert data_dir() == tmp_path / ".local/share/jobd"
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert data_dir() == tmp_path / "xdg/jobd"
    monkeypatch.setenv("JOBD_DATA_DIR", str(tmp_path / "explicit"))
    assert data_dir() == tmp_path / "explicit"


def test_token_from_env_else_the_local_admin_token(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("JOBD_DATA_DIR", str(tmp_path))
    monkeypatch.delenv("JOBD_TOKEN", raising=False)
    assert default_token("http://127.0.0.1:8765") is None

    (tmp_path / "admin.token").write_text("from-file\n")
    assert default_token("http://127.0.0.1:8765") == "from-file"
    assert default_token("http://localhost:8765") == "from-file"
    # The local broker's admin token is not offered to another host.
    assert default_token("http://gpu-box.example.org:8765") is None

    monkeypatch.setenv("JOBD_TOKEN", "from-env")
    assert default_token("http://gpu-box.example.org:8765") == "from-env"


# -- streams ---------------------------------------------------------------------------------


def test_log_chunks_carry_offset_and_done() -> None:
    def broker(request: httpx.Request) -> httpx.Response:
        assert request.url.params["offset"] == "5"
        headers = {"X-Jobd-Offset": "11", "X-Jobd-Done": "true"}
        return httpx.Response(200, content=b"world\n", headers=headers)

    chunk = client_for(broker).read_logs(7, offset=5)

    assert (chunk.data, chunk.offset, chunk.done) == (b"world\n", 11, True)


class ScriptedWatch:
    """A broker whose list and watch answers are scripted, in order."""

    def __init__(self, lists: list[Any], watches: list[Any]) -> None:
        self.lists, self.watches = lists, watches
        self.watched_since: list[str] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/jobs":
            return httpx.Response(200, json=self.lists.pop(0))
        self.watched_since.append(request.url.params["since"])
        answer = self.watches.pop(0)
        if answer == 410:
            return httpx.Response(410, json={"detail": "revision 3 has been compacted"})
        return httpx.Response(200, json=answer)


def test_job_changes_lists_then_watches_and_relists_after_410() -> None:
    broker = ScriptedWatch(
        lists=[
            {"items": [job(1, 1), job(2, 2)], "revision": 3},
            # After the 410: job 1 moved on unseen, job 2 did not, job 3 is new.
            {"items": [job(1, 9), job(2, 4), job(3, 8)], "revision": 9},
        ],
        watches=[
            {"revision": 4, "changes": [change(4, "MODIFIED", job(2, 4, "Succeeded"))]},
            410,
            {"revision": 10, "changes": [change(10, "DELETED", job(3, 10))]},
        ],
    )
    changes = client_for(broker).job_changes(known=[job(1, 1)])

    seen = [
        (op, j["metadata"]["id"], j["metadata"]["resource_version"]) for op, j in take(changes, 5)
    ]

    assert seen == [
        ("ADDED", 2, 2),  # job 1 was known already
        ("MODIFIED", 2, 4),
        ("MODIFIED", 1, 9),  # the relist reports only what moved
        ("ADDED", 3, 8),
        ("DELETED", 3, 10),
    ]
    assert broker.watched_since == ["3", "4", "9"]


def change(rev: int, op: str, obj: dict[str, Any]) -> dict[str, Any]:
    return {"revision": rev, "kind": "Job", "op": op, "object": obj}


def take(changes: Any, n: int) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for item in changes:
        out.append(item)
        if len(out) == n:
            break
    return out


def test_job_changes_end_at_the_deadline() -> None:
    broker = ScriptedWatch(lists=[{"items": [], "revision": 1}], watches=[])

    changes = list(client_for(broker).job_changes(deadline=time.monotonic() - 1))

    assert changes == []
    assert broker.watched_since == []


def test_apply_results_are_typed() -> None:
    def broker(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        assert body["dry_run"] is True
        result = {"kind": "Project", "name": "p", "action": "created", "object": {"a": 1}}
        return httpx.Response(200, json={"results": [result]})

    (result,) = client_for(broker).apply([{"kind": "Project"}], dry_run=True)

    assert (result.kind, result.name, result.action, result.object) == (
        "Project",
        "p",
        "created",
        {"a": 1},
    )
