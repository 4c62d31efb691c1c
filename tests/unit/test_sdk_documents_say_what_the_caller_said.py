"""The SDK's requests and readings, without a broker (jobd/sdk/documents.py, executor.py)."""

from __future__ import annotations

import base64
import sys
from pathlib import Path

import pytest

from jobd.api.models import Job
from jobd.sdk import documents, runner
from jobd.sdk.client import Client
from jobd.sdk.executor import Executor, _outcome_in
from jobd.wire.errors import ApiError


def test_a_job_document_holds_only_what_was_said() -> None:
    document = documents.job_document(
        "python train.py --lr '3e-4'",
        project=None,
        cwd="/data",
        name="lr3",
        labels={"team": "vision"},
        spec_fields={"gpus": 1, "gpu_memory": "8GiB", "preemptible": True},
    )
    assert document["metadata"] == {
        "project": "default",
        "name": "lr3",
        "labels": {"team": "vision"},
    }
    assert document["spec"] == {
        "command": ["python", "train.py", "--lr", "3e-4"],
        "cwd": "/data",
        "resources": {"gpus": 1, "gpu_memory": "8GiB"},
        "preemptible": True,
    }
    Job.model_validate(document)


def test_an_unknown_keyword_or_an_empty_command_is_refused() -> None:
    with pytest.raises(TypeError, match="'gpu' is no field"):
        documents.job_document(["x"], project=None, cwd=None, spec_fields={"gpu": 1})
    with pytest.raises(ValueError, match="empty"):
        documents.job_document("  ", project=None, cwd=None, spec_fields={})


def test_an_array_has_a_member_per_index() -> None:
    job = documents.job_document(["x"], project="p", cwd="/", spec_fields={})
    array = documents.array_document(job, [0, 1, 2], parallelism=2)
    assert array["kind"] == "JobArray"
    assert array["spec"]["array"] == {"indices": [0, 1, 2], "parallelism": 2}


@pytest.mark.parametrize(
    ("ref", "target"),
    [(7, 7), ("12", 12), ("ml/lr3", ("ml", "lr3")), ("lr3", ("ctx", "lr3"))],
)
def test_a_ref_says_an_id_or_a_name(ref: int | str, target: object) -> None:
    assert documents.ref_target(ref, "ctx") == target


def test_a_ref_that_names_nothing_is_refused() -> None:
    with pytest.raises(ValueError, match="names no job"):
        documents.ref_target("ml/", None)
    with pytest.raises(ApiError) as missing:
        documents.named_job([], "ml", "lr3")
    assert missing.value.status == 404


def test_a_selector_is_text_or_a_mapping() -> None:
    assert documents.selector_text({"a": "1", "b": "2"}) == "a=1,b=2"
    assert documents.selector_text("a!=1") == "a!=1"
    assert documents.selector_text({}) is None


def test_lines_survive_any_chunking() -> None:
    text = "héllo\nwörld\nend"
    data = text.encode()
    for size in (1, 2, 3, 5, len(data)):
        chunks = [data[i : i + size] for i in range(0, len(data), size)]
        assert list(documents.lines(chunks)) == ["héllo\n", "wörld\n", "end"]


def test_the_outcome_is_found_among_merged_stderr_lines() -> None:
    encoded = base64.b64encode(b"x" * 10_000).decode()
    pieces = [encoded[i : i + 4096] for i in range(0, len(encoded), 4096)]
    lines = [f"{runner.RESULT_MARKER} {p}" for p in pieces]
    output = "\n".join(
        [
            "training",
            lines[0],
            "Traceback (most recent",
            *lines[1:],
            "stderr late",
            f"{runner.END_MARKER} {len(pieces)}",
            "more stderr",
        ]
    )
    assert _outcome_in(output) == b"x" * 10_000
    assert _outcome_in("\n".join([*lines[1:], f"{runner.END_MARKER} {len(pieces)}"])) is None
    assert _outcome_in("no outcome here") is None


def test_an_array_too_large_to_store_through_the_broker_asks_for_a_folder(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("JOBD_EXECUTOR_DIR", raising=False)
    monkeypatch.setenv("JOBD_CONFIG", str(tmp_path / "none.yaml"))
    executor = Executor(client=Client("http://127.0.0.1:9", token="t" * 40))
    with pytest.raises(ValueError, match="shared folder"):  # refused before any request
        executor.map_array(len, [b"x" * (1 << 20)] * 64)


def test_without_cloudpickle_the_executor_says_which_extra_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "cloudpickle", None)  # as if not installed
    with pytest.raises(ModuleNotFoundError, match=r"jobd\[executor\]"):
        Executor()
