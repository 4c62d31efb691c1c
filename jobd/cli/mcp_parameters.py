"""The MCP tool `submit_job`'s parameters for the job spec's fields, built from their Options.

Each JobSpec field that `job submit` takes (api/field_options.py) is a parameter here
too, named as the field, described by the same help, and published with the field's own
JSON Schema (its bounds included: `checkpoint_grace_s` says `maximum: 300` because the
model does).
The MCP SDK reads a tool's input schema from the function's signature, so the tool is
given one (`with_spec_parameters`). The values are not validated on the way in: the Job
they make is (cli/submit.py `job_document`), and its refusal names the parameter.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Annotated, Any

from pydantic import Field, WithJsonSchema

from jobd.api.field_options import Kind, SpecOption
from jobd.cli.submit import SPEC_OPTIONS, FieldPath, SubmitError, spec_value

__all__ = ["said_by_parameters", "with_spec_parameters"]

Document = dict[str, Any]

# What a parameter's description adds to the field's help, by how the value is typed.
_NOTES: dict[Kind, str] = {"duration": " In seconds."}
# JSON Schema keys of the field that the parameter says its own way (None: not said).
_FIELD_ONLY = ("title", "default", "description")
_BY_NAME = {spec.parameter: spec for spec in SPEC_OPTIONS}


def with_spec_parameters(submit: Callable[..., Document]) -> Callable[..., Document]:
    """`submit`, whose spec fields come as `**fields`, as a tool with a parameter for each."""
    own = inspect.signature(submit, eval_str=True).parameters.values()
    parameters = [p for p in own if p.kind is not p.VAR_KEYWORD]
    parameters += [_parameter(spec) for spec in SPEC_OPTIONS]

    def tool(**arguments: Any) -> Document:
        return submit(**arguments)

    tool.__name__ = tool.__qualname__ = submit.__name__
    tool.__doc__ = submit.__doc__
    annotations = {p.name: p.annotation for p in parameters}
    tool.__annotations__ = {**annotations, "return": Document}
    signature = inspect.Signature(parameters, return_annotation=Document)
    tool.__signature__ = signature  # type: ignore[attr-defined]  # what inspect reads first
    return tool


def said_by_parameters(arguments: Mapping[str, Any]) -> dict[FieldPath, Any]:
    """The spec's fields the tool was given (None: not said), by their path in the spec."""
    said = {}
    for name, given in arguments.items():
        spec = _BY_NAME.get(name)
        if spec is None:
            raise SubmitError(f"{name}: no such parameter")
        value = spec_value(spec.option, given, name)
        if value is not None:
            said[spec.path] = value
    return said


def _parameter(spec: SpecOption) -> inspect.Parameter:
    described = Field(description=spec.help + _NOTES.get(spec.option.kind, ""))
    annotation = Annotated[Any, WithJsonSchema(_nullable(spec.schema)), described]
    return inspect.Parameter(
        spec.parameter, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=annotation
    )


def _nullable(schema: Mapping[str, Any]) -> dict[str, Any]:
    """The field's schema, where null (not said) is allowed too."""
    kept = {k: v for k, v in schema.items() if k not in _FIELD_ONLY}
    if {"type": "null"} in kept.get("anyOf", ()):
        return kept
    return {"anyOf": [kept, {"type": "null"}]}
