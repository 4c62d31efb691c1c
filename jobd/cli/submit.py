"""`job submit`'s flags turned into a Job document, before anything is sent.

Only what the user said goes into the document, so every default (priority, preemptible,
grace) stays the server's to resolve from the project. What the broker would refuse is
refused here already, in the user's terms: the flag, not the field.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

from jobd.api.models import ADMISSION, API_VERSION, MAX_GRACE_S, Job

__all__ = ["SubmitError", "build_submit_job"]

Document = dict[str, Any]


class SubmitError(ValueError):
    """A `job submit` argument that cannot become a Job; the message names the flag."""


# Which flag set each field, so a refusal talks in the user's terms.
_FLAGS = {
    ("metadata", "name"): "--name",
    ("metadata", "project"): "--project",
    ("spec", "priority"): "--priority",
    ("spec", "checkpoint_grace_s"): "--checkpoint-grace",
    ("spec", "resources"): "--gpus",
    ("spec", "env"): "--env",
    ("spec", "depends_on"): "--depends-on",
    ("spec", "command"): "the command",
}


def build_submit_job(
    command: Sequence[str],
    *,
    project: str = "default",
    cwd: str = ".",
    name: str | None = None,
    priority: int | None = None,
    preemptible: bool | None = None,
    checkpoint_grace: float | None = None,
    gpus: int | None = None,
    depends_on: Sequence[str] = (),
    depends_on_any_exit: bool = False,
    env: Sequence[str] = (),
    resume_from: str | None = None,
) -> Document:
    """The Job `job submit` sends: only what was said, so every default stays the server's."""
    if checkpoint_grace is not None and checkpoint_grace > MAX_GRACE_S:
        raise SubmitError(
            f"--checkpoint-grace {checkpoint_grace:g} s is over the {MAX_GRACE_S} s cap "
            "on checkpoint grace"
        )
    environment = _parse_env(env)
    if resume_from is not None:
        environment["RESUME_FROM"] = resume_from
    said = {
        "env": environment or None,
        "priority": priority,
        "preemptible": preemptible,
        "checkpoint_grace_s": checkpoint_grace,
        "resources": None if gpus is None else {"gpus": gpus},
        "depends_on": [int(d) if d.isdigit() else d for d in depends_on] or None,
        "depends_on_any_exit": depends_on_any_exit or None,
    }
    spec: dict[str, Any] = {
        "command": list(command),
        "cwd": os.path.abspath(os.path.expanduser(cwd)),
    }
    spec.update({k: v for k, v in said.items() if v is not None})
    metadata = {"project": project, **({"name": name} if name else {})}
    document = {"apiVersion": API_VERSION, "kind": "Job", "metadata": metadata, "spec": spec}
    _validate_submit(document)
    return document


def _parse_env(pairs: Sequence[str]) -> dict[str, str]:
    env: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SubmitError(f"--env expects KEY=VALUE, got {pair!r}")
        env[key] = value
    return env


def _validate_submit(document: Document) -> None:
    """Refuse here what the broker would refuse, naming the flag rather than the field."""
    try:
        Job.model_validate(document, context=ADMISSION)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = tuple(str(p) for p in err["loc"])
        flag = next((f for k, f in _FLAGS.items() if loc[: len(k)] == k), ".".join(loc))
        raise SubmitError(f"{flag}: {err['msg'].removeprefix('Value error, ')}") from None
