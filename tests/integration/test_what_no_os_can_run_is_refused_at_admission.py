"""A job that no OS could start is refused when it is submitted, naming the field.

NUL bytes in argv, cwd or the environment, and environment names that are empty or hold
`=`, once reached an agent and crashed it (`ValueError: embedded null byte`), taking every
job on that worker with it. They are 422 at admission, by the create fast path, by apply
and by the CLI's manifest loader alike, and the store is left as it was.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from jobd.api.manifests import ManifestError, load_path, parse_resource
from jobd.api.models import Job, JobSpec, ObjectMeta
from jobd.store.sql import open_store
from tests.integration.conftest import job_document

pytestmark = pytest.mark.anyio


POISON: list[tuple[dict[str, Any], dict[str, Any], str]] = [
    ({}, {"command": ["python3", "-c", "print(1)\x00"]}, "spec.command: word 2 holds a NUL"),
    ({}, {"command": ["\x00"]}, "spec.command: word 0 holds a NUL"),
    ({}, {"cwd": "/tmp/\x00x"}, "spec.cwd: holds a NUL"),
    ({}, {"env": {"A\x00B": "1"}}, "spec.env: 'A\\x00B': a variable's name must be non-empty"),
    ({}, {"env": {"A": "1\x002"}}, "spec.env: A: the value holds a NUL"),
    ({}, {"env": {"A=B": "1"}}, "spec.env: 'A=B': a variable's name must be non-empty"),
    ({}, {"env": {"": "1"}}, "spec.env: '': a variable's name must be non-empty"),
    ({"name": "trailing\n"}, {}, "metadata.name: must be 1-63"),
    ({"labels": {"team": "vision\n"}}, {}, "metadata.labels: label 'team'"),
    ({"labels": {"": "x"}}, {}, "metadata.labels: label ''"),
]


def _poisoned(meta: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
    doc = job_document("poison", **spec)
    doc["metadata"].update(meta)
    return doc


@pytest.mark.parametrize(("meta", "spec", "detail"), POISON)
async def test_create_and_apply_refuse_it_naming_the_field(
    api: httpx.AsyncClient, meta: dict[str, Any], spec: dict[str, Any], detail: str
) -> None:
    keep = (await api.post("/jobs", json=job_document("keep"))).json()
    created = await api.post("/jobs", json=_poisoned(meta, spec))
    applied = await api.post("/apply", json={"documents": [_poisoned(meta, spec)]})
    assert created.status_code == 422 and detail in created.json()["detail"], created.text
    assert applied.status_code == 422 and detail in applied.json()["detail"], applied.text
    assert (await api.get("/jobs")).json()["items"] == [keep]


def test_the_cli_names_file_line_and_field(tmp_path: Path) -> None:
    manifest = tmp_path / "bad.yaml"
    manifest.write_text(
        'kind: Job\nmetadata: {name: ok}\nspec:\n  command: [python3]\n  env:\n    "A=B": "1"\n'
    )
    (doc,) = load_path(manifest)
    with pytest.raises(ManifestError) as refused:
        parse_resource(doc)
    assert str(refused.value).startswith(f"{manifest}:5: spec.env: 'A=B': a variable's name"), (
        refused.value
    )


def test_a_job_an_older_broker_stored_still_reads_back(tmp_path: Path) -> None:
    """The rules bind what is submitted; a store row written before them still parses."""
    store = open_store(f"sqlite:///{tmp_path}/jobd.db")
    try:
        old = Job(
            metadata=ObjectMeta(name="old"), spec=JobSpec(command=["a\x00b"], env={"A=B": ""})
        )
        (stored,) = store.create_jobs([old])
        again = store.get_job(stored.id)
        assert again is not None and again.spec.command == ["a\x00b"]
        assert [j.id for j in store.list_jobs()] == [stored.id]
    finally:
        store.close()
