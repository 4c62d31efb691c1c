"""How each field of a job spec is said outside a document: a `job submit` option, an MCP
parameter, or neither, and why.

A JobSpec field carries an `Option` (or a `NoOption` with its reason) as `Annotated`
metadata, next to its type and limits. From these, and from the field's own JSON Schema
(its bounds: `le=MAX_GRACE_S` becomes `maximum: 300`), the CLI builds `job submit`'s
options and the refusals that name a flag (cli/submit_options.py, cli/submit.py) and the
MCP server the parameters of `submit_job` (cli/mcp_parameters.py). So a new spec field
is one edit, in models.py. pydantic keeps metadata it does not know out of validation and out of
the JSON Schema, so the OpenAPI document is the same with or without these.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from pydantic import BaseModel
    from pydantic.fields import FieldInfo

__all__ = ["Kind", "NoOption", "Option", "SpecOption", "marker", "spec_options"]

Kind = Literal[
    "integer", "number", "text", "size", "duration", "switch", "flag", "pairs", "refs", "urls"
]
"""How a value is typed and read:

integer, number, text: as it is; size: text such as `40GiB` (the model reads it);
duration: seconds, typed as `90`, `10m`, `2h` on the command line, whole seconds in the spec
(rounded up); switch: `--x/--no-x`, unsaid by default; flag: `--x` says true, its absence
says nothing; pairs: `--env K=V` repeated, an object to the MCP tool; refs: repeated job
ids or names (digits become ids); urls: repeated URLs, each an object `{url: URL}` of
the field's list (the MCP tool takes the objects themselves).
"""


@dataclass(frozen=True)
class Option:
    """A spec field's `job submit` option and MCP parameter (named as the field).

    `help` serves both; `{minimum}` and `{maximum}` in it are the field's own bounds.
    """

    flag: str
    help: str
    kind: Kind = "text"
    metavar: str | None = None
    # The MCP parameter's name where the field's own would be ambiguous (a nested field's,
    # `retry.limit`, as `retry_limit`); the field's name otherwise.
    parameter: str | None = None

    @property
    def keyword(self) -> str:
        """The option's Python name: `--checkpoint-grace` is `checkpoint_grace`."""
        return self.flag.removeprefix("--").replace("-", "_")


@dataclass(frozen=True)
class NoOption:
    """A spec field said another way (or only in a manifest); `reason` says which. On a
    nested model, it stands for all of its fields."""

    reason: str


@dataclass(frozen=True)
class SpecOption:
    """One spec field that has an Option: where it sits in the spec, and its JSON Schema."""

    path: tuple[str, ...]
    option: Option
    schema: dict[str, Any]

    @property
    def parameter(self) -> str:
        """The MCP parameter's name: the field's own (`checkpoint_grace_s`, `gpus`)."""
        return self.option.parameter or self.path[-1]

    @property
    def help(self) -> str:
        bounds = {k: _bound(self.schema, k) for k in ("minimum", "maximum")}
        return self.option.help.format(**bounds)


def spec_options(model: type[BaseModel]) -> list[SpecOption]:
    """Every field of `model` (nested models walked into) that has an Option, in order.

    Raises TypeError for a field with neither an Option nor a NoOption, so a field added
    without saying how it is submitted fails every build of the options, and the test.
    """
    root = model.model_json_schema()
    return list(_walk(model, root, root, ()))


def marker(info: FieldInfo) -> Option | NoOption | None:
    """The Option or NoOption a field is declared with, if any."""
    return next((m for m in info.metadata if isinstance(m, Option | NoOption)), None)


def _walk(
    model: type[BaseModel], own: dict[str, Any], root: dict[str, Any], path: tuple[str, ...]
) -> Iterator[SpecOption]:
    for name, info in model.model_fields.items():
        said, where = marker(info), (*path, name)
        field_schema = own["properties"][name]
        nested = _nested_model(info.annotation)
        if isinstance(said, Option):
            yield SpecOption(where, said, _inlined(field_schema, root))
        elif said is None and nested is not None:
            yield from _walk(nested, _definition(field_schema, root), root, where)
        elif said is None:
            raise TypeError(f"{'.'.join(where)}: declare its Option or NoOption (api/models.py)")


def _inlined(schema: Any, root: dict[str, Any]) -> Any:
    """`schema` with each `$ref` replaced by its definition: a field's schema stands alone
    (a list of NotifyTarget is an MCP parameter, which has no `$defs` to refer to)."""
    if isinstance(schema, list):
        return [_inlined(s, root) for s in schema]
    if not isinstance(schema, dict):
        return schema
    if "$ref" in schema:
        definition = root["$defs"][schema["$ref"].rpartition("/")[2]]
        rest = {k: v for k, v in schema.items() if k != "$ref"}
        return _inlined({**definition, **rest}, root)
    return {k: _inlined(v, root) for k, v in schema.items()}


def _nested_model(annotation: Any) -> type[BaseModel] | None:
    from pydantic import BaseModel

    arms = typing.get_args(annotation) if _is_union(annotation) else (annotation,)
    return next((a for a in arms if isinstance(a, type) and issubclass(a, BaseModel)), None)


def _is_union(annotation: Any) -> bool:
    return typing.get_origin(annotation) in (typing.Union, types.UnionType)


def _definition(schema: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    """The schema of a nested model, which a field names by `$ref` (in an `anyOf` when
    the field may be null)."""
    refs = [arm["$ref"] for arm in (schema, *schema.get("anyOf", ())) if "$ref" in arm]
    definition: dict[str, Any] = root["$defs"][refs[0].rpartition("/")[2]]
    return definition


def _bound(schema: dict[str, Any], key: str) -> Any:
    """A bound of the schema, or of the first of its `anyOf` arms that has one."""
    arms = [schema, *schema.get("anyOf", ())]
    return next((arm[key] for arm in arms if key in arm), None)
