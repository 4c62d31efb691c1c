"""The workload's environment (CONTRACT.md §6): identity, grace, checkpoint dir, GPUs, no token."""

from __future__ import annotations

from pathlib import Path

from jobd.api.models import Effective, Job, JobSpec, JobStatus, ObjectMeta, Resources
from jobd.worker.jobview import JobView
from jobd.worker.settings import WorkerSettings, effective_grace, workload_env

WORKER_ENV = {
    "PATH": "/usr/bin",
    "HOME": "/home/me",
    "JOBD_TOKEN": "secret",
    "JOBD_DB": "postgresql://jobd:pw@db/jobd",
    "JOBD_URL": "http://broker:8765",
    "JOBD_WORKER_CHECKPOINT_ROOT": "/ckpt",
    "RESUME_FROM": "/somewhere/else",
}


def _settings(default_grace: float = 60) -> WorkerSettings:
    return WorkerSettings(
        name="w",
        slots=2,
        gpus=[0, 1],
        checkpoint_root=Path("/ckpt"),
        default_grace_s=default_grace,
        state_dir=Path("/tmp/state"),
        base_env=WORKER_ENV,
    )


def _job(grace: float | None = None, gpus: int = 0, env: dict[str, str] | None = None) -> JobView:
    job = Job(
        metadata=ObjectMeta(id=42, name="train", project="vision"),
        spec=JobSpec(command=["python"], env=env or {}, resources=Resources(gpus=gpus)),
        status=JobStatus(effective=Effective(checkpoint_grace_s=grace), gpus=[1] if gpus else []),
    )
    return JobView(job.model_dump(mode="json"))  # as the agent reads the watch's JSON


def test_identity_grace_and_checkpoint_dir_are_set() -> None:
    env = workload_env(_job(grace=300), _settings(), Path("/ckpt/42"))
    assert env["JOBD_JOB_ID"] == "42" and env["JOBD_JOB_NAME"] == "train"
    assert env["JOBD_PROJECT"] == "vision"
    assert env["JOBD_CHECKPOINT_GRACE_S"] == "300"
    assert env["JOBD_CHECKPOINT_DIR"] == "/ckpt/42/"
    assert env["PATH"] == "/usr/bin"


def test_no_jobd_setting_of_the_worker_leaks_into_the_workload() -> None:
    env = workload_env(_job(), _settings(), Path("/ckpt/42"))
    for private in ("JOBD_TOKEN", "JOBD_DB", "JOBD_URL", "JOBD_WORKER_CHECKPOINT_ROOT"):
        assert private not in env
    assert "RESUME_FROM" not in env  # only when the submitter (or job resume) sets it


def test_resume_from_and_env_come_from_the_spec() -> None:
    env = workload_env(_job(env={"RESUME_FROM": "/ckpt/7/latest.pt"}), _settings(), Path("/c"))
    assert env["RESUME_FROM"] == "/ckpt/7/latest.pt"


def test_grace_falls_back_to_the_worker_default() -> None:
    assert effective_grace(_job(), _settings(default_grace=45)) == 45
    assert effective_grace(_job(grace=0), _settings(default_grace=45)) == 0
    env = workload_env(_job(grace=2.5), _settings(), Path("/c"))
    assert env["JOBD_CHECKPOINT_GRACE_S"] == "2.5"


def test_a_job_sees_exactly_the_gpus_it_was_assigned() -> None:
    inherited = {**WORKER_ENV, "CUDA_VISIBLE_DEVICES": "0,1,2,3"}
    settings = _settings()
    settings.base_env = inherited
    assert workload_env(_job(gpus=1), settings, Path("/c"))["CUDA_VISIBLE_DEVICES"] == "1"
    # Set and empty: a job that asked for no GPU sees none, not the worker's.
    assert workload_env(_job(), settings, Path("/c"))["CUDA_VISIBLE_DEVICES"] == ""


def test_the_jobs_own_env_cannot_widen_its_gpus_or_change_its_identity() -> None:
    env = {"CUDA_VISIBLE_DEVICES": "0,1,2,3", "JOBD_JOB_ID": "7", "JOBD_CHECKPOINT_DIR": "/x"}
    got = workload_env(_job(env=env), _settings(), Path("/ckpt/42"))
    assert got["CUDA_VISIBLE_DEVICES"] == ""
    assert got["JOBD_JOB_ID"] == "42" and got["JOBD_CHECKPOINT_DIR"] == "/ckpt/42/"
