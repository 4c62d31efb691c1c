"""`job submit --max-runtime 2h --idle-timeout 30m --max-pending 1d`: whole seconds in the
spec, and a refusal naming the flag."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from jobd.api.models import ADMISSION, JobSpec
from jobd.cli.submit import SubmitError, build_submit_job


def test_durations_become_whole_seconds_in_the_spec() -> None:
    doc = build_submit_job(
        ["train"],
        max_runtime=7200.0,
        idle_timeout=1800.0,
        max_pending=86400.0,
        ttl_after_finished=0.5,
    )
    spec = doc["spec"]
    assert (spec["max_runtime_s"], spec["idle_timeout_s"], spec["max_pending_s"]) == (
        7200,
        1800,
        86400,
    )
    assert spec["ttl_after_finished_s"] == 1, "a fraction is rounded up, never to 0"


def test_unsaid_limits_stay_out_of_the_document() -> None:
    spec = build_submit_job(["train"])["spec"]
    assert not {"max_runtime_s", "idle_timeout_s", "max_pending_s"} & spec.keys()


def test_a_zero_limit_is_refused_naming_the_flag() -> None:
    with pytest.raises(SubmitError, match=r"^--max-runtime: "):
        build_submit_job(["train"], max_runtime=0.0)


@pytest.mark.parametrize("bad", [0, -5, True, 1.5, "2h"])
def test_the_api_refuses_what_is_no_positive_whole_number_of_seconds(bad: object) -> None:
    with pytest.raises(ValidationError, match="idle_timeout_s"):
        JobSpec.model_validate({"command": ["x"], "idle_timeout_s": bad}, context=ADMISSION)
