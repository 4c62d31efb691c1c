"""What `--array` and `--sweep` take, the members they make, and what lands in each argv."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from jobd.api.arrays import (
    MAX_MEMBERS,
    ArraySpec,
    array_id_of,
    parse_indices,
    parse_sweep,
    substitute,
)
from jobd.api.models import ADMISSION
from jobd.cli.submit import SubmitError, as_array, build_submit_job


@pytest.mark.parametrize(
    ("text", "indices"),
    [
        ("0-7", list(range(8))),
        ("1,3,5", [1, 3, 5]),
        ("0-15:2", list(range(0, 16, 2))),
        ("0-2,8, 10-11", [0, 1, 2, 8, 10, 11]),
        ("4", [4]),
    ],
)
def test_indices_are_ranges_lists_and_steps(text: str, indices: list[int]) -> None:
    assert parse_indices(text) == indices


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("7-0", "runs upwards"),
        ("0-4:0", "step of 1 or more"),
        ("a-b", "is not N, A-B or A-B:STEP"),
        ("-1", "is not N"),
        ("", "is not N"),
        ("0-3,2", "index 2 is given twice"),
        (f"0-{MAX_MEMBERS}", "more than 10,000"),
        ("1000000", "0 to 999,999"),
        ("0-999999999999", "more than 10,000"),  # refused before any list is built
    ],
)
def test_bad_indices_say_what_is_wrong(text: str, said: str) -> None:
    with pytest.raises(ValueError, match=said):
        parse_indices(text)


def test_a_sweep_is_the_product_of_its_parameters_last_fastest() -> None:
    spec = ArraySpec(sweep=parse_sweep(["lr=1e-3,3e-4", "seed=1,2,3"]))
    members = spec.members()
    assert spec == ArraySpec.model_validate({"sweep": {"lr": ["1e-3", "3e-4"], "seed": [1, 2, 3]}})
    assert [m.index for m in members] == list(range(6))
    assert [m.values for m in members][:4] == [
        {"lr": "1e-3", "seed": "1"},
        {"lr": "1e-3", "seed": "2"},
        {"lr": "1e-3", "seed": "3"},
        {"lr": "3e-4", "seed": "1"},
    ]


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["lr"], "expected KEY=V1,V2"),
        (["lr=1", "lr=2"], "swept twice"),
        (["my-lr=1"], "a parameter is a name"),
        (["i=1,2"], "{i} is the index"),
        (["lr=1,,2"], "non-empty"),
        (["lr="], "non-empty"),
        (["lr=1,1"], "given twice"),
        ([f"a={','.join(map(str, range(101)))}", f"b={','.join(map(str, range(100)))}"], "over"),
    ],
)
def test_bad_sweeps_say_what_is_wrong(flags: list[str], said: str) -> None:
    with pytest.raises(ValueError, match=said):
        parse_sweep(flags)


def test_placeholders_are_replaced_literally_and_unknown_ones_kept() -> None:
    argv = ["python", "-c", "print({'a': 1}, '{x}')", "--lr={lr}", "{i}{i}", "{seed}"]
    got = substitute(argv, {"i": "3", "lr": "1e-3"})
    assert got == ["python", "-c", "print({'a': 1}, '{x}')", "--lr=1e-3", "33", "{seed}"]


def test_a_sweep_may_list_its_members_and_none_twice() -> None:
    listed = ArraySpec.model_validate({"sweep": [{"lr": "1", "bs": 8}, {"lr": "2"}]})
    assert [m.values for m in listed.members()] == [{"lr": "1", "bs": "8"}, {"lr": "2"}]
    with pytest.raises(ValidationError, match="given twice"):
        ArraySpec.model_validate({"sweep": [{"lr": "1"}, {"lr": "1"}]})
    with pytest.raises(ValidationError, match="short forms are for manifests"):
        ArraySpec.model_validate_json('{"sweep": {"lr": ["1"]}}')


def test_yaml_values_are_strings_or_integers_never_floats() -> None:
    assert ArraySpec.model_validate({"sweep": {"seed": [1, 2]}}).sweep == [
        {"seed": "1"},
        {"seed": "2"},
    ]
    with pytest.raises(ValidationError, match="quote a number"):
        ArraySpec.model_validate({"sweep": {"lr": [0.001]}}, context=ADMISSION)
    with pytest.raises(ValidationError, match="one of the two"):
        ArraySpec.model_validate({"indices": "0-1", "sweep": {"lr": ["1"]}})
    assert ArraySpec.model_validate({"indices": [5, 2]}).indices == [5, 2]


def test_array_refs_are_a_capital_a_and_an_id() -> None:
    assert [array_id_of(r) for r in ("A12", "a12", "A0", "A12x", "12")] == [
        12,
        None,
        None,
        None,
        None,
    ]


def test_submit_flags_make_a_job_array_document() -> None:
    job = build_submit_job(["train", "{i}"], cwd="/tmp")
    array = as_array(job, "0-3", ())
    assert array["kind"] == "JobArray" and array["spec"]["array"] == {"indices": [0, 1, 2, 3]}
    swept = as_array(job, None, ("lr=1,2",))
    assert swept["spec"]["array"] == {"sweep": [{"lr": "1"}, {"lr": "2"}]}
    with pytest.raises(SubmitError, match="--array and --sweep exclude each other"):
        as_array(job, "0-3", ("lr=1",))
    with pytest.raises(SubmitError, match="--array: '3-1'"):
        as_array(job, "3-1", ())
    with pytest.raises(SubmitError, match="--sweep: 'lr'"):
        as_array(job, None, ("lr",))


def test_the_example_sweep_reads_as_six_members() -> None:
    from pathlib import Path

    from jobd.api.arrays import JobArray
    from jobd.api.manifests import load_path, parse_resource

    example = Path(__file__).parents[2] / "examples" / "sweep-lr.yaml"
    (doc,) = load_path(example)
    array = parse_resource(doc)
    assert isinstance(array, JobArray)
    members = array.spec.array.members()
    assert [m.command(array.spec.command)[3:] for m in members][4] == ["lr=3e-4", "seed=2"]


def test_a_job_with_spec_array_reads_as_an_array_and_errors_name_the_line() -> None:
    from jobd.api.arrays import JobArray
    from jobd.api.manifests import ManifestError, load_documents, parse_resource

    text = "kind: Job\nmetadata: {name: a}\nspec:\n  command: [x]\n  array:\n    indices: 3-1\n"
    with pytest.raises(ManifestError, match=r"^f.yaml:6: spec.array.indices: .*runs upwards"):
        parse_resource(load_documents(text, "f.yaml")[0])
    ok = text.replace("3-1", "0-2")
    assert isinstance(parse_resource(load_documents(ok, "f.yaml")[0]), JobArray)


def test_only_a_member_sees_jobd_array_index() -> None:
    from pathlib import Path

    from jobd.api.models import ArrayRef, Job, JobSpec, ObjectMeta
    from jobd.worker.jobview import JobView
    from jobd.worker.settings import WorkerSettings, workload_env

    settings = WorkerSettings(
        name="w",
        slots=1,
        gpus=[],
        checkpoint_root=Path("/ckpt"),
        default_grace_s=60,
        state_dir=Path("/tmp/state"),
        base_env={"PATH": "/usr/bin"},
    )
    spec = JobSpec(command=["x"], env={"JOBD_ARRAY_INDEX": "99"})  # a member's is its own
    member = Job(
        metadata=ObjectMeta(id=7, name="a-3", array=ArrayRef(id=1, name="a", index=3)), spec=spec
    )
    resumed = Job(metadata=ObjectMeta(id=8, name="a-3-r1"), spec=spec)  # holds it in its env
    plain = Job(metadata=ObjectMeta(id=9, name="b"), spec=JobSpec(command=["x"]))
    member, resumed, plain = (JobView(j.model_dump(mode="json")) for j in (member, resumed, plain))
    assert workload_env(member, settings, Path("/ckpt/7"))["JOBD_ARRAY_INDEX"] == "3"
    assert workload_env(resumed, settings, Path("/ckpt/8"))["JOBD_ARRAY_INDEX"] == "99"
    settings.base_env["JOBD_ARRAY_INDEX"] = "5"  # the worker's own never reaches a job
    assert "JOBD_ARRAY_INDEX" not in workload_env(plain, settings, Path("/ckpt/9"))


def test_a_rerun_member_keeps_its_index() -> None:
    from jobd.cli.submit import build_rerun_job

    member = {
        "metadata": {"id": 7, "name": "a-3", "array": {"id": 1, "name": "a", "index": 3}},
        "spec": {"command": ["train", "3"]},
        "status": {"phase": "Failed"},
    }
    rerun = build_rerun_job(member)
    assert rerun["spec"]["env"] == {"JOBD_ARRAY_INDEX": "3"}
    assert "array" not in rerun["metadata"]
