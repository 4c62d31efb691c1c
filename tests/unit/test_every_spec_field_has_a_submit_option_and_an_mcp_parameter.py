"""A job spec field is declared once, in the model, with how it is submitted.

Walks JobSpec's fields (nested models included): each has an Option, and then a `job
submit` option of that flag and an MCP `submit_job` parameter of the field's name whose
JSON Schema holds the field's bounds; or a NoOption with its reason. A field added without
either fails here. What the tool and the command line say reaches the spec as the model
holds it (the env an object both ways, durations in whole seconds).
"""

from __future__ import annotations

import json
import typing
from collections.abc import Iterator
from typing import Annotated, Any

import anyio
import click
import pytest
from click.testing import CliRunner
from pydantic import BaseModel

from jobd.api.field_options import NoOption, Option, marker, spec_options
from jobd.api.models import MAX_GRACE_S, JobSpec, Resources
from jobd.cli.job_main import cli
from jobd.cli.submit import build_submit_job

pytest.importorskip("mcp")

from jobd.cli.mcp_server import build_server

Document = dict[str, Any]


def leaves(model: type[BaseModel], path: tuple[str, ...] = ()) -> Iterator[tuple[str, Any]]:
    """Every field of the model as `a.b`, with its marker; a nested model's fields in turn."""
    for name, info in model.model_fields.items():
        said = marker(info)
        # A nested model, or an optional one (`retry: RetryPolicy | None`).
        arms = typing.get_args(info.annotation) or (info.annotation,)
        nested = next((a for a in arms if isinstance(a, type) and issubclass(a, BaseModel)), None)
        if said is None and nested is not None:
            yield from leaves(nested, (*path, name))
        else:
            yield ".".join((*path, name)), said


class FakeBroker:
    """What `submit_job` reaches: the document it would send, answered as created."""

    def __init__(self) -> None:
        self.sent: list[Document] = []

    def create_job(self, document: Document) -> Document:
        self.sent.append(document)
        return {**document, "metadata": {**document["metadata"], "id": 1}}


def submit_options() -> dict[str, click.Option]:
    command = cli.get_command(click.Context(cli), "submit")
    assert command is not None
    return {o: p for p in command.params if isinstance(p, click.Option) for o in p.opts}


def mcp_schema() -> dict[str, Any]:
    server = build_server(FakeBroker())  # type: ignore[arg-type]
    tools = anyio.run(server.list_tools)
    schema: dict[str, Any] = next(t for t in tools if t.name == "submit_job").input_schema
    return schema


async def call_submit(broker: FakeBroker, **arguments: Any) -> Any:
    return await build_server(broker).call_tool("submit_job", arguments)  # type: ignore[arg-type]


def test_every_spec_field_is_a_submit_option_and_an_mcp_parameter_or_says_why_not() -> None:
    flags, parameters = submit_options(), mcp_schema()["properties"]
    fields = dict(leaves(JobSpec))
    assert {"resources.gpus", "resources.gpu_memory", "checkpoint_grace_s"} <= fields.keys()
    for field, said in fields.items():
        assert said is not None, f"{field}: declare its Option or NoOption (api/field_options.py)"
        if isinstance(said, NoOption):
            assert said.reason.strip(), f"{field}: a NoOption says why"
            continue
        assert said.flag in flags, f"{field}: no `job submit {said.flag}`"
        parameter = said.parameter or field.rpartition(".")[2]
        assert parameter in parameters, f"{field}: no MCP parameter {parameter}"


def test_options_and_parameters_are_named_once() -> None:
    found = spec_options(JobSpec)
    assert len({s.option.flag for s in found}) == len(found)
    assert len({s.parameter for s in found}) == len(found)
    own = {"command", "project", "name", "cwd"}  # the tool's own parameters
    assert not own & {s.parameter for s in found}


def test_a_field_without_a_marker_fails_the_build() -> None:
    class Unsaid(BaseModel):
        said: Annotated[int | None, Option("--said", "Said.")] = None
        why_not: Annotated[int | None, NoOption("only in a manifest")] = None
        forgotten: int | None = None

    with pytest.raises(TypeError, match="forgotten"):
        spec_options(Unsaid)


def test_bounds_come_from_the_fields_own_limits() -> None:
    parameters = mcp_schema()["properties"]
    grace = json.dumps(parameters["checkpoint_grace_s"])
    assert f'"maximum": {MAX_GRACE_S}' in grace
    most_gpus = next(m.le for m in Resources.model_fields["gpus"].metadata if hasattr(m, "le"))
    assert parameters["gpus"]["anyOf"][0]["maximum"] == most_gpus
    assert f"at most {MAX_GRACE_S}" in (submit_options()["--checkpoint-grace"].help or "")


def test_the_mcp_tool_sends_its_env_as_an_object_and_durations_as_whole_seconds() -> None:
    broker = FakeBroker()
    anyio.run(
        lambda: call_submit(
            broker,
            command=["train"],
            cwd="/work",
            env={"EQ": "a=b", "K": "v"},
            gpus=1,
            gpu_memory="40GiB",
            max_runtime_s=0.5,
            depends_on=["12", "prep"],
            auto_resume=True,
        )
    )
    spec = broker.sent[0]["spec"]
    assert spec["env"] == {"EQ": "a=b", "K": "v"}
    assert spec["resources"] == {"gpus": 1, "gpu_memory": "40GiB"}
    assert (spec["max_runtime_s"], spec["depends_on"], spec["auto_resume"]) == (
        1,
        [12, "prep"],
        True,
    )


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"checkpoint_grace_s": 900}, "checkpoint_grace_s 900 s is over the 300 s cap"),
        ({"gpus": -1}, "gpus: Input should be greater than or equal to 0"),
        ({"env": {"A=B": "1"}}, "env: 'A=B'"),
    ],
)
def test_the_mcp_tool_refuses_naming_its_parameter(arguments: dict[str, Any], message: str) -> None:
    from mcp.server.mcpserver.exceptions import ToolError

    broker = FakeBroker()
    with pytest.raises(ToolError, match=message) as refused:
        anyio.run(lambda: call_submit(broker, command=["true"], cwd="/", **arguments))
    assert "--" not in str(refused.value) and not broker.sent


def test_auto_resume_is_a_submit_flag() -> None:
    assert build_submit_job(["train"], cwd="/", auto_resume=True)["spec"]["auto_resume"] is True
    assert "auto_resume" not in build_submit_job(["train"], cwd="/", auto_resume=False)["spec"]


def test_submit_help_lists_the_spec_options_with_their_help() -> None:
    shown = CliRunner().invoke(cli, ["submit", "--help"]).output
    for spec in spec_options(JobSpec):
        assert spec.option.flag in shown
    assert "--preemptible / --no-preemptible" in shown
    assert "at most 300" in shown
