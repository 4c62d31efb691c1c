"""Which env values are secret, how they read masked, and that a job's end scrubs them.

Pure functions: api/secrets.py's patterns and mask, and the state machine's terminal
moves (controllers/transitions.py), which replace a finished job's secret values by the
mask in the very document the caller writes — all but Preempted, which may be resumed.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from jobd.api.models import ADMISSION, Job, JobSpec, ObjectMeta, Phase, Project
from jobd.api.secrets import (
    DEFAULT_SECRET_ENV_KEYS,
    MASK,
    holds_secrets,
    mask_job,
    patterns_of,
    secret_keys,
)
from jobd.controllers import transitions
from jobd.worker.hooks.prestart import StartFailed, check_unmasked
from jobd.worker.jobview import JobView

NOW = datetime(2026, 12, 3, tzinfo=UTC)
ENV = {"HF_TOKEN": "hf_real", "WANDB_API": "wb_real", "EPOCHS": "3"}


def _job(project_patterns: list[str] | None = None, **env: str) -> Job:
    job = Job(
        metadata=ObjectMeta(id=7, name="train"),
        spec=JobSpec(command=["python", "train.py"], env=env or dict(ENV)),
    )
    job.status.effective.secret_env_keys = project_patterns
    return job


@pytest.mark.parametrize(
    "key",
    ["HF_TOKEN", "hf_token", "GITHUB_TOKEN_RO", "AWS_SECRET_ACCESS_KEY", "DB_PASSWORD", "API_KEY"],
)
def test_the_default_patterns_mark_common_secrets_whatever_their_case(key: str) -> None:
    assert secret_keys({key: "v"}, DEFAULT_SECRET_ENV_KEYS) == [key]


@pytest.mark.parametrize("key", ["EPOCHS", "LR", "KEYBOARD", "PATH", "WANDB_API"])
def test_plain_keys_are_not_secret_by_default(key: str) -> None:
    assert secret_keys({key: "v"}, DEFAULT_SECRET_ENV_KEYS) == []


def test_a_project_pattern_adds_to_the_defaults_case_insensitively() -> None:
    job = _job(["wandb_*"])
    assert patterns_of(job) == (*DEFAULT_SECRET_ENV_KEYS, "wandb_*")
    masked = mask_job(job)
    assert masked.spec.env == {"HF_TOKEN": MASK, "WANDB_API": MASK, "EPOCHS": "3"}
    assert job.spec.env == ENV  # the job read is left as it was


def test_a_job_without_secret_values_is_returned_itself() -> None:
    plain = _job(EPOCHS="3")
    assert mask_job(plain) is plain and not holds_secrets(plain)
    already = _job(HF_TOKEN=MASK)
    assert mask_job(already) is already and not holds_secrets(already)
    assert holds_secrets(_job())


@pytest.mark.parametrize(
    ("patterns", "reason"),
    [
        ([""], "pattern 0 is empty"),
        (["OK", "   "], "pattern 1 is empty"),
        (["A\x00B"], "control character"),
        (["X" * 257], "over 256 characters"),
        ([f"K{i}" for i in range(65)], "at most 64"),
    ],
)
def test_a_project_refuses_patterns_no_key_could_match(patterns: list[str], reason: str) -> None:
    doc = {"metadata": {"name": "p"}, "spec": {"secret_env_keys": patterns}}
    with pytest.raises(ValidationError) as refused:
        Project.model_validate(doc, context=ADMISSION)
    error = refused.value.errors()[0]
    assert error["loc"][:2] == ("spec", "secret_env_keys")
    assert reason in error["msg"]


@pytest.mark.parametrize("phase", [Phase.SUCCEEDED, Phase.FAILED, Phase.CANCELLED])
def test_a_job_that_ends_keeps_no_secret_value(phase: Phase) -> None:
    job = _job(["WANDB_API"])
    ended, _events = transitions.finish(job, phase, NOW)
    assert ended.spec.env == {"HF_TOKEN": MASK, "WANDB_API": MASK, "EPOCHS": "3"}
    scrubbed = next(c for c in ended.status.conditions if c.type == "SecretsScrubbed")
    assert scrubbed.message.endswith("HF_TOKEN, WANDB_API")
    assert job.spec.env == ENV  # the spec the ended copy was made from is not touched


def test_a_preempted_job_keeps_its_secrets_for_resume() -> None:
    ended, _events = transitions.finish(_job(), Phase.PREEMPTED, NOW)
    assert ended.spec.env == ENV
    assert all(c.type != "SecretsScrubbed" for c in ended.status.conditions)


def test_every_way_to_an_end_scrubs() -> None:
    """Cancel of a queued job, a worker's report, the loops' decisions: all through _end."""
    queued = _job()
    cancelled, _ = transitions.cancel(queued, NOW)
    assert cancelled.status.phase == Phase.CANCELLED and not holds_secrets(cancelled)
    failed, _ = transitions.dependency_failed(queued, "parent", NOW)
    assert not holds_secrets(failed)
    running = _job()
    running.status.phase, running.status.worker = Phase.RUNNING, "w"
    done, _ = transitions.complete(running, "w", 0, None, NOW)
    assert done.status.phase == Phase.SUCCEEDED and not holds_secrets(done)
    gone, _ = transitions.process_vanished(running, NOW)
    assert gone.status.phase == Phase.FAILED and not holds_secrets(gone)


def test_an_agent_refuses_to_start_a_job_whose_secret_reached_it_masked() -> None:
    """Its workload would otherwise run with the mask for its token."""
    check_unmasked(_view(_job(EPOCHS="3", LR="0.1")))
    check_unmasked(_view(_job()))
    with pytest.raises(StartFailed, match=r"spec\.env\.HF_TOKEN reached this worker masked"):
        check_unmasked(_view(mask_job(_job())))
    masked_by_project = mask_job(_job(["wandb_*"], WANDB_API="wb_real"))
    with pytest.raises(StartFailed, match=r"spec\.env\.WANDB_API reached this worker masked"):
        check_unmasked(_view(masked_by_project))  # the project's patterns count too


def _view(job: Job) -> JobView:
    """The job as the agent reads it from the watch's JSON."""
    return JobView(job.model_dump(mode="json"))
