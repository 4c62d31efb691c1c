"""A job's `cwd` is a directory from `/` (issue 21).

A relative one was taken (201) and resolved on the worker, in the agent's own directory:
`"../.."` ran in `/`. It is refused at admission, naming `spec.cwd`, by create, apply and
arrays alike (`job` makes a relative one absolute where it runs, so it never sends one).
A `cwd` naming a file fails its job saying it is not a directory, not that it is missing.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from jobd.api.models import JobSpec
from jobd.worker.hooks.prestart import StartFailed, check_launchable
from tests.integration.conftest import job_document

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("cwd", ["../..", ".", "sub/dir", "~/work"])
async def test_a_relative_cwd_is_refused_naming_the_field(api: httpx.AsyncClient, cwd: str) -> None:
    created = await api.post("/jobs", json=job_document("rel", cwd=cwd))
    applied = await api.post("/apply", json={"documents": [job_document("rel", cwd=cwd)]})
    array = job_document("sweep", cwd=cwd) | {"kind": "JobArray"}
    array["spec"]["array"] = {"indices": [0, 1]}
    arrayed = await api.post("/apply", json={"documents": [array]})
    for answer in (created, applied, arrayed):
        assert answer.status_code == 422, answer.text
        assert answer.json()["detail"].startswith("spec.cwd: "), answer.text
    assert (await api.get("/jobs")).json()["items"] == []


async def test_an_absolute_cwd_and_none_are_taken(api: httpx.AsyncClient) -> None:
    assert (await api.post("/jobs", json=job_document("abs", cwd="/tmp"))).status_code == 201
    assert (await api.post("/jobs", json=job_document("home"))).status_code == 201


def test_the_schema_says_a_cwd_starts_at_the_root() -> None:
    pattern = JobSpec.model_json_schema()["properties"]["cwd"]["pattern"]
    assert pattern.startswith("^(/")


def test_a_cwd_naming_a_file_is_not_a_directory(tmp_path: Path) -> None:
    afile = tmp_path / "train.py"
    afile.write_text("print(1)\n")
    with pytest.raises(StartFailed, match="is not a directory") as failed:
        check_launchable(["true"], str(afile), {})
    assert "spec.cwd" in str(failed.value)
    with pytest.raises(StartFailed, match="does not exist"):
        check_launchable(["true"], str(tmp_path / "gone"), {})
