"""The agent's `JobView` reads a job's JSON as the broker's pydantic `Job` reads it, field
for field, defaults included; a document that is no job is refused naming what is missing."""

from __future__ import annotations

from typing import Any

import pytest

from jobd.api.models import (
    ArrayRef,
    Effective,
    Job,
    JobSpec,
    JobStatus,
    ObjectMeta,
    Phase,
    Resources,
)
from jobd.worker.jobview import JobView, UnreadableJob


def _full() -> Job:
    return Job(
        metadata=ObjectMeta(
            id=7, name="sweep-3", project="vision", array=ArrayRef(id=2, name="sweep", index=3)
        ),
        spec=JobSpec(
            command=["python", "train.py"],
            cwd="/data/run",
            env={"EPOCHS": "3", "HF_TOKEN": "hf_real"},
            resources=Resources(cpus=2.5, memory="3GiB"),
        ),
        status=JobStatus(
            phase=Phase.RUNNING,
            signal="preempt",
            worker="gpu-1",
            attempt=4,
            retries=2,
            resume_from="/ckpt/7/latest.pt",
            gpus=[0, 3],
            effective=Effective(checkpoint_grace_s=45.0, secret_env_keys=["wandb_*"]),
        ),
    )


def _fields(job: Job | JobView) -> dict[str, Any]:
    array = job.metadata.array
    return {
        "id": job.id,
        "project": job.project,
        "name": job.metadata.name,
        "array": None if array is None else (array.id, array.index),
        "command": job.spec.command,
        "cwd": job.spec.cwd,
        "env": job.spec.env,
        "resources": (job.spec.resources.cpus, job.spec.resources.memory),
        "phase": job.status.phase,
        "signal": job.status.signal,
        "worker": job.status.worker,
        "attempt": job.status.attempt,
        "retries": job.status.retries,
        "resume_from": job.status.resume_from,
        "gpus": job.status.gpus,
        "grace": job.status.effective.checkpoint_grace_s,
        "secret_keys": job.status.effective.secret_env_keys,
    }


@pytest.mark.parametrize(
    "job", [_full(), Job(metadata=ObjectMeta(id=8), spec=JobSpec(command=["true"]))]
)
def test_a_view_reads_what_the_model_reads(job: Job) -> None:
    whole, sparse = job.model_dump(mode="json"), job.model_dump(mode="json", exclude_defaults=True)
    for document in (whole, sparse):  # as stored, and with the defaults left out
        assert _fields(JobView(document)) == _fields(job)


@pytest.mark.parametrize(
    ("document", "missing"),
    [
        ({"spec": {"command": ["true"]}}, "metadata.id"),
        ({"metadata": {"id": 7}}, "spec.command"),
        ({"metadata": {"id": 7}, "spec": {"command": []}}, "spec.command"),
        ({"metadata": {"id": 7}, "spec": {"command": ["x"]}, "status": {"phase": "Gone"}}, "Gone"),
        ({"metadata": {"id": 7}, "spec": {"command": ["x"]}, "status": []}, "status"),
    ],
)
def test_a_document_that_is_no_job_is_refused_naming_what_is_wrong(
    document: dict[str, Any], missing: str
) -> None:
    with pytest.raises(UnreadableJob, match=missing):
        JobView(document)
