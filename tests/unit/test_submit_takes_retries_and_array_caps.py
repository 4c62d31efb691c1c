"""`job submit --retries N` and `--array 0-99%8`: the spec as the broker takes it, and a
refusal naming the flag; `indices: 0-99%8` in a manifest says the same cap."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from jobd.api.arrays import ArraySpec, parse_parallelism
from jobd.cli.submit import SubmitError, as_array, build_submit_job


def test_retries_set_the_policys_limit_and_nothing_else() -> None:
    assert build_submit_job(["train"], retries=3)["spec"]["retry"] == {"limit": 3}
    assert "retry" not in build_submit_job(["train"])["spec"]


@pytest.mark.parametrize("bad", [-1, 101])
def test_a_limit_out_of_bounds_is_refused_naming_the_flag(bad: int) -> None:
    with pytest.raises(SubmitError, match=r"^--retries: "):
        build_submit_job(["train"], retries=bad)


def test_a_percent_caps_how_many_members_run_at_once() -> None:
    assert parse_parallelism("0-99%8") == ("0-99", 8)
    assert parse_parallelism("0-3,8") == ("0-3,8", None)
    doc = as_array(build_submit_job(["train", "{i}"]), "0-9%2", ())
    assert doc["spec"]["array"] == {"indices": list(range(10)), "parallelism": 2}


@pytest.mark.parametrize("cap", ["0", "x", "", "-1", "10001"])
def test_a_cap_that_is_no_count_is_refused_naming_the_flag(cap: str) -> None:
    with pytest.raises(SubmitError, match=r"^--array: %"):
        as_array(build_submit_job(["train"]), f"0-9%{cap}", ())


def test_a_manifest_says_the_cap_in_its_indices_or_as_parallelism() -> None:
    assert ArraySpec.model_validate({"indices": "0-7%3"}).parallelism == 3
    assert ArraySpec.model_validate({"indices": [1, 2], "parallelism": 1}).parallelism == 1
    with pytest.raises(ValidationError, match="disagree"):
        ArraySpec.model_validate({"indices": "0-7%3", "parallelism": 2})
    with pytest.raises(ValidationError, match="parallelism"):
        ArraySpec.model_validate({"indices": [1], "parallelism": 0})
