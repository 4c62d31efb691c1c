"""`job submit`'s options for the job spec's fields, built from the fields' Options.

Each JobSpec field says its flag, help and kind (api/field_options.py); here each becomes
a click option of the same name and type, so a field added to the spec is on the command
line without an edit here. Building them reads the models (pydantic), which `job get`
and `job --help` must not pay for: `SpecCommand` builds them when the verb is run or its
own help is shown, not when the group lists it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from jobd.cli.durations import Duration

if TYPE_CHECKING:
    from jobd.api.field_options import Kind, SpecOption

__all__ = ["SpecCommand", "spec_click_option"]

# What the command line adds to a field's help, by how the value is typed.
# (A DURATION and a SIZE are told once, in the verb's help.)
_NOTES: dict[Kind, str] = {
    "pairs": " Repeatable.",
    "refs": " Repeatable.",
    "urls": " Repeatable.",
}
# How click takes each kind of value (api/field_options.py `Kind`).
_CLICK: dict[Kind, dict[str, Any]] = {
    "text": {"type": str},
    "size": {"type": str},  # the model reads it
    "integer": {"type": int},
    "number": {"type": float},
    "duration": {"type": Duration()},
    "switch": {"default": None},  # unsaid unless given: the project's default applies
    "flag": {"is_flag": True},
    "pairs": {"multiple": True},
    "refs": {"multiple": True},
    "urls": {"multiple": True},
}


class SpecCommand(click.Command):
    """A command whose options for the spec's fields are built on first use, and put
    after its own option named `spec_after`."""

    def __init__(self, *args: Any, spec_after: str, **kwargs: Any) -> None:
        self._spec_after = spec_after
        self._built: list[click.Parameter] | None = None
        super().__init__(*args, **kwargs)

    @property  # click holds a plain list; this one is built on first use
    def params(self) -> list[click.Parameter]:
        if self._built is None:
            self._built = self._with_spec_options()
        return self._built

    @params.setter
    def params(self, value: list[click.Parameter]) -> None:
        self._own, self._built = value, None

    def _with_spec_options(self) -> list[click.Parameter]:
        from jobd.cli.submit import SPEC_OPTIONS

        at = 1 + next(i for i, p in enumerate(self._own) if p.name == self._spec_after)
        spec = [spec_click_option(s) for s in SPEC_OPTIONS]
        return [*self._own[:at], *spec, *self._own[at:]]


def spec_click_option(spec: SpecOption) -> click.Option:
    """The click option of one spec field: its flag, metavar, help and type."""
    option = spec.option
    flag = option.flag
    if option.kind == "switch":
        flag = f"{flag}/--no-{flag.removeprefix('--')}"
    said = dict(_CLICK[option.kind])
    if option.metavar is not None:
        said["metavar"] = option.metavar
    help_ = spec.help + _NOTES.get(option.kind, "")
    return click.Option([option.keyword, flag], help=help_, **said)
