"""Job arrays and sweeps: one spec, many member jobs (`job submit --array/--sweep`).

A JobArray is a Job's spec plus `array:`, which says its members: `indices` (`0-7`,
`1,3,5`, `0-15:2`, or a list of integers) or a `sweep`: parameters (`lr: ["1e-3", "3e-4"]`)
whose cartesian product makes one member per combination, kept as the list of each
member's values (which may also be given as such). Each member is an ordinary Job
named `<array>-<index>`, labelled `jobd/array: <array>`, with `metadata.array` saying
which array it belongs to and its index. Its argv has `{i}` (the index) and `{KEY}` (a
sweep value) replaced literally in every word; any other `{...}` is left as written, so a
`python -c` with braces in it runs unchanged. The index is the array index for
`indices`, the position in the product (0, 1, ...) for a sweep.

Pure: no store. Next stage: controllers/verbs/arrays.py admits an array and its members
in one transaction.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import (
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from jobd.api.models import JobSpec, ObjectMeta, Strict
from jobd.api.vocabulary import DEFAULT_PROJECT, NAME_PATTERN, array_id_of

__all__ = [
    "ARRAY_LABEL",
    "MAX_INDEX",
    "MAX_MEMBERS",
    "MAX_NAME",
    "ArrayMember",
    "ArrayMeta",
    "ArraySpec",
    "JobArray",
    "JobArraySpec",
    "JobArrayStatus",
    "array_id_of",
    "member_name",
    "parse_indices",
    "parse_parallelism",
    "parse_sweep",
    "substitute",
]

# Bounds that keep one request, one transaction and every member's name in reason.
MAX_MEMBERS = 10_000
MAX_INDEX = 999_999
MAX_NAME = 63 - len(f"-{MAX_INDEX}")  # an array's name, and `-<index>` after it
ARRAY_LABEL = "jobd/array"
_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_RANGE = re.compile(r"^([0-9]+)(?:-([0-9]+)(?::([0-9]+))?)?$")


def parse_indices(text: str) -> list[int]:
    """`0-7`, `1,3,5`, `0-15:2` or a mix (`0-3,8`): the indices, in the order given.

    ValueError says what is wrong: a malformed part, a range running backwards, a repeated
    index, or more than MAX_MEMBERS of them.
    """
    indices: list[int] = []
    for part in text.split(","):
        found = _RANGE.match(part.strip())
        if found is None:
            raise ValueError(f"{part.strip()!r} is not N, A-B or A-B:STEP")
        first, last, step = found.groups()
        start, stop = int(first), int(last if last is not None else first)
        if stop < start or (step is not None and int(step) < 1):
            raise ValueError(f"{part.strip()!r}: a range runs upwards, by a step of 1 or more")
        if (stop - start) // int(step or 1) + len(indices) >= MAX_MEMBERS:
            raise ValueError(f"more than {MAX_MEMBERS:,} members")
        indices.extend(range(start, stop + 1, int(step or 1)))
    return _checked_indices(indices)


def parse_parallelism(text: str) -> tuple[str, int | None]:
    """`0-99%8` (Slurm's form) as its indices' text and the cap on members running at
    once; text without `%` has no cap. ValueError for a cap that is not a count >= 1."""
    indices, sep, cap = text.rpartition("%")
    if not sep:
        return text, None
    if not cap.strip().isdigit() or int(cap) < 1 or int(cap) > MAX_MEMBERS:
        raise ValueError(f"%{cap}: at most how many run at once, 1 to {MAX_MEMBERS:,}")
    return indices, int(cap)


def _checked_indices(indices: list[int]) -> list[int]:
    if not indices:
        raise ValueError("no index given")
    if len(indices) > MAX_MEMBERS:
        raise ValueError(f"{len(indices):,} members is over the {MAX_MEMBERS:,} an array may have")
    if any(not 0 <= i <= MAX_INDEX for i in indices):
        raise ValueError(f"indices run from 0 to {MAX_INDEX:,}")
    if len(set(indices)) != len(indices):
        repeated = next(i for i in indices if indices.count(i) > 1)
        raise ValueError(f"index {repeated} is given twice")
    return indices


def parse_sweep(pairs: Sequence[str]) -> list[dict[str, str]]:
    """`--sweep KEY=V1,V2` flags as the sweep's members: their values' product."""
    sweep: dict[str, list[str]] = {}
    for pair in pairs:
        key, sep, values = pair.partition("=")
        if not sep:
            raise ValueError(f"{pair!r}: expected KEY=V1,V2,...")
        if key in sweep:
            raise ValueError(f"{key!r} is swept twice: give its values once, comma-separated")
        sweep[key] = values.split(",")
    return _product(sweep)


def _product(sweep: dict[str, list[str]]) -> list[dict[str, str]]:
    """One member per combination of the values, the last parameter varying fastest."""
    size = 1
    for key, values in sweep.items():
        _check_parameter(key)
        if not values:
            raise ValueError(f"{key}: give at least one value")
        if len(set(values)) != len(values):
            raise ValueError(f"{key}: a value is given twice")
        size *= len(values)
        if size > MAX_MEMBERS:
            raise ValueError(f"the product is over the {MAX_MEMBERS:,} members an array may have")
    keys = list(sweep)
    product = itertools.product(*(sweep[k] for k in keys))
    return _checked_sweep([dict(zip(keys, combo, strict=True)) for combo in product])


def _check_parameter(key: str) -> None:
    if not _KEY.match(key) or key == "i":
        raise ValueError(
            f"{key!r}: a parameter is a name of letters, digits and '_' ({{i}} is the index)"
        )


def _checked_sweep(members: list[dict[str, str]]) -> list[dict[str, str]]:
    if len(members) > MAX_MEMBERS:
        raise ValueError(f"{len(members):,} members is over the {MAX_MEMBERS:,} an array may have")
    seen: set[tuple[tuple[str, str], ...]] = set()
    for values in members:
        if not values:
            raise ValueError("a member without a parameter")
        for key, value in values.items():
            _check_parameter(key)
            if value == "":
                raise ValueError(f"{key}: every value must be non-empty")
        combo = tuple(sorted(values.items()))
        if combo in seen:
            raise ValueError(f"the member {values} is given twice")
        seen.add(combo)
    return members


# Manifests and `job submit` say indices as text (`0-7`), a sweep as its parameters'
# values (`{lr: [...], seed: [...]}`, integers too). Over HTTP (JSON) an array is said in
# its one stored form, which the OpenAPI document states: the list of indices, or the
# list of each member's values (strings). The CLI sends that form.
_SHORT_FORMS = "(the short forms are for manifests and `job submit`)"


def _indices_field(value: Any, info: ValidationInfo) -> Any:
    if isinstance(value, str):
        if info.mode == "json":
            raise ValueError(f"a list of indices {_SHORT_FORMS}")
        return parse_indices(value)
    if isinstance(value, list) and all(type(v) is int for v in value):
        return _checked_indices(value)
    return value  # pydantic says what is wrong with it


def _sweep_field(value: Any, info: ValidationInfo) -> Any:
    json = info.mode == "json"
    if isinstance(value, dict):
        if json:
            raise ValueError(f"a list of each member's values {_SHORT_FORMS}")
        sweep = {}
        for key, values in value.items():
            if not isinstance(values, list):
                raise ValueError(f"{key}: expected a list of values")
            sweep[str(key)] = [_sweep_value(str(key), v, json) for v in values]
        return _product(sweep)
    if isinstance(value, list) and all(isinstance(v, dict) for v in value):
        return _checked_sweep(
            [{str(k): _sweep_value(str(k), v, json) for k, v in m.items()} for m in value]
        )
    return value  # pydantic says what is wrong with it


def _sweep_value(key: str, value: Any, json: bool) -> str:
    if isinstance(value, str):
        return value
    if type(value) is int and not json:
        return str(value)
    if json:
        raise ValueError(f"{key}: {value!r}: a value is a string {_SHORT_FORMS}")
    raise ValueError(
        f"{key}: {value!r}: a value is a string or an integer; quote a number such as "
        "'1e-3' so it is put in the command as written"
    )


# What the fields take over HTTP, for the OpenAPI document (the validators enforce it).
_INDICES_SCHEMA: dict[str, Any] = {
    "anyOf": [
        {
            "type": "array",
            "items": {"type": "integer", "minimum": 0, "maximum": MAX_INDEX},
            "minItems": 1,
            "maxItems": MAX_MEMBERS,
            "uniqueItems": True,
        },
        {"type": "null"},
    ]
}
_SWEEP_SCHEMA: dict[str, Any] = {
    "type": "array",
    "maxItems": MAX_MEMBERS,
    "uniqueItems": True,
    "items": {
        "type": "object",
        "minProperties": 1,
        "propertyNames": {"pattern": "^(?!i$)[A-Za-z_][A-Za-z0-9_]*$"},
        "additionalProperties": {"type": "string", "minLength": 1},
    },
}
# One of the two: indices, or a sweep of at least one member.
_ONE_OF_TWO: dict[str, Any] = {
    "oneOf": [
        {
            "required": ["indices"],
            "properties": {"indices": {"type": "array"}, "sweep": {"maxItems": 0}},
        },
        {
            "required": ["sweep"],
            "properties": {"indices": {"type": "null"}, "sweep": {"minItems": 1}},
        },
    ]
}


class ArraySpec(Strict):
    """Which members: `indices` or `sweep`, one of the two; and how many may run at once
    (`parallelism`, or `%N` after the indices' text: Slurm's `--array 0-99%8`)."""

    model_config = ConfigDict(json_schema_extra=_ONE_OF_TWO)

    # Read as written (a range's text, or integers), kept as the list of indices.
    indices: Annotated[
        list[int] | None, BeforeValidator(_indices_field), WithJsonSchema(_INDICES_SCHEMA)
    ] = None
    # Read as each member's values or as the parameters' values, kept as the former.
    sweep: Annotated[
        list[dict[str, str]], BeforeValidator(_sweep_field), WithJsonSchema(_SWEEP_SCHEMA)
    ] = Field(default_factory=list)

    # At most this many members bound to workers at once (the scheduler skips the rest
    # meanwhile); None: as many as fit.
    parallelism: int | None = Field(default=None, ge=1, le=MAX_MEMBERS)

    @model_validator(mode="before")
    @classmethod
    def _cap_in_indices(cls, data: Any) -> Any:
        """`indices: 0-99%8` says `parallelism: 8` too (not over HTTP: JSON has the list)."""
        if not isinstance(data, dict) or not isinstance(data.get("indices"), str):
            return data
        text, cap = parse_parallelism(data["indices"])
        if cap is None:
            return data
        if data.get("parallelism") not in (None, cap):
            raise ValueError(f"%{cap} and parallelism: {data['parallelism']} disagree")
        return {**data, "indices": text, "parallelism": cap}

    @model_validator(mode="after")
    def _one_of_two(self) -> ArraySpec:
        if (self.indices is None) == (not self.sweep):
            raise ValueError("give indices or sweep parameters, one of the two")
        return self

    def members(self) -> list[ArrayMember]:
        """Every member, in order: the indices as given, or the sweep's members."""
        if self.indices is not None:
            return [ArrayMember(i, {}) for i in self.indices]
        return [ArrayMember(n, values) for n, values in enumerate(self.sweep)]


class JobArraySpec(JobSpec):
    array: ArraySpec


class JobArrayStatus(Strict):
    jobs: list[int] = Field(default_factory=list)  # the members' ids, in index order


class ArrayMeta(ObjectMeta):
    """An array's metadata: its name leaves room for `-<index>` in its members' names."""

    name: str | None = Field(
        default=None, json_schema_extra={"pattern": NAME_PATTERN, "maxLength": MAX_NAME}
    )

    @field_validator("name")
    @classmethod
    def _room_for_an_index(cls, value: str | None) -> str | None:
        if value is not None and len(value) > MAX_NAME:
            raise ValueError(
                f"an array's name is at most {MAX_NAME} characters, so that its members' "
                f"names (`{value[:8]}...-<index>`) are names too"
            )
        return value


class JobArray(Strict):
    api_version: Literal["jobd/v1"] = Field(default="jobd/v1", alias="apiVersion")
    kind: Literal["JobArray"] = "JobArray"
    metadata: ArrayMeta = Field(default_factory=ArrayMeta)
    spec: JobArraySpec
    status: JobArrayStatus = Field(default_factory=JobArrayStatus)

    @property
    def id(self) -> int:
        assert self.metadata.id is not None, "array has not been stored yet"
        return self.metadata.id

    @property
    def project(self) -> str:
        return self.metadata.project or DEFAULT_PROJECT

    @property
    def ref(self) -> str:
        return f"{self.project}/{self.metadata.name}"


@dataclass(frozen=True)
class ArrayMember:
    """One member: its index and the sweep's values for it."""

    index: int
    values: dict[str, str]

    def command(self, argv: Sequence[str]) -> list[str]:
        return substitute(argv, {"i": str(self.index), **self.values})


def substitute(argv: Sequence[str], values: dict[str, str]) -> list[str]:
    """Each `{NAME}` of `values` replaced literally in every word; other braces kept."""

    def one(found: re.Match[str]) -> str:
        return values.get(found.group(1), found.group(0))

    return [_PLACEHOLDER.sub(one, word) for word in argv]


def member_name(array_name: str, index: int) -> str:
    return f"{array_name}-{index}"
