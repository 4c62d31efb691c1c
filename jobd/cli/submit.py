"""`job submit`'s flags turned into a Job document, before anything is sent.

Only what the user said goes into the document, so every default (priority, preemptible,
grace) stays the server's to resolve from the project. What the broker would refuse is
refused here already, in the user's terms: the flag, not the field.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from jobd.api.arrays import parse_indices, parse_sweep
from jobd.api.models import ADMISSION, API_VERSION, MAX_GRACE_S, Job
from jobd.api.vocabulary import ARRAY_INDEX

__all__ = [
    "MASKED_VALUE",
    "RERUNS_LABEL",
    "SubmitError",
    "as_array",
    "build_rerun_job",
    "build_submit_job",
]

Document = dict[str, Any]


# What a read shows in place of a secret env value (and what a finished job's spec keeps
# once its secrets are scrubbed): a rerun cannot send it as if it were the value.
MASKED_VALUE = "***"
# The label of a job `job rerun` made: the id of the job it copies.
RERUNS_LABEL = "jobd/reruns"
# What a rerun does not copy: its parents already ran (as `job resume` does).
_NOT_RERUN = ("depends_on", "depends_on_any_exit")
_TERMINAL = frozenset({"Succeeded", "Failed", "Preempted", "Cancelled"})


class SubmitError(ValueError):
    """A `job submit` argument that cannot become a Job; the message names the flag."""


# Never copied by `--export ALL` nor named by it: a job never holds jobd's token (CONTRACT §6).
_NEVER_EXPORTED = frozenset({"JOBD_TOKEN", "JOBD_TOKEN_FILE"})

# Which flag set each field, so a refusal talks in the user's terms.
_FLAGS = {
    ("metadata", "name"): "--name",
    ("metadata", "project"): "--project",
    ("spec", "priority"): "--priority",
    ("spec", "checkpoint_grace_s"): "--checkpoint-grace",
    ("spec", "resources", "gpu_memory"): "--gpu-memory",
    ("spec", "resources"): "--gpus",
    ("spec", "env"): "--env/--export",
    ("spec", "depends_on"): "--depends-on",
    ("spec", "command"): "the command",
    ("spec", "max_runtime_s"): "--max-runtime",
    ("spec", "idle_timeout_s"): "--idle-timeout",
    ("spec", "max_pending_s"): "--max-pending",
    ("spec", "ttl_after_finished_s"): "--ttl-after-finished",
}


def build_submit_job(
    command: Sequence[str],
    *,
    shell: str | None = None,
    export: Sequence[str] = (),
    environ: Mapping[str, str] | None = None,
    project: str = "default",
    cwd: str = ".",
    name: str | None = None,
    priority: int | None = None,
    preemptible: bool | None = None,
    checkpoint_grace: float | None = None,
    gpus: int | None = None,
    gpu_memory: str | None = None,
    depends_on: Sequence[str] = (),
    depends_on_any_exit: bool = False,
    env: Sequence[str] = (),
    resume_from: str | None = None,
    max_runtime: float | None = None,
    idle_timeout: float | None = None,
    max_pending: float | None = None,
    ttl_after_finished: float | None = None,
) -> Document:
    """The Job `job submit` sends: only what was said, so every default stays the server's.

    `shell` runs through `sh -c` (on purpose: pipes, globs); `export` names variables of
    `environ` (the submitter's environment) to copy into the spec, or `ALL` of them, as
    `sbatch --export`; `--env` wins over an exported value.
    """
    if checkpoint_grace is not None and checkpoint_grace > MAX_GRACE_S:
        raise SubmitError(
            f"--checkpoint-grace {checkpoint_grace:g} s is over the {MAX_GRACE_S} s cap "
            "on checkpoint grace"
        )
    command = _command(command, shell)
    environment = _exported(export, os.environ if environ is None else environ)
    environment.update(_parse_env(env))
    if resume_from is not None:
        environment["RESUME_FROM"] = resume_from
    said = {
        "env": environment or None,
        "priority": priority,
        "preemptible": preemptible,
        "checkpoint_grace_s": checkpoint_grace,
        "resources": _resources(gpus, gpu_memory),
        "depends_on": [int(d) if d.isdigit() else d for d in depends_on] or None,
        "depends_on_any_exit": depends_on_any_exit or None,
        "max_runtime_s": _whole_seconds(max_runtime),
        "idle_timeout_s": _whole_seconds(idle_timeout),
        "max_pending_s": _whole_seconds(max_pending),
        "ttl_after_finished_s": _whole_seconds(ttl_after_finished),
    }
    spec: dict[str, Any] = {
        "command": command,
        "cwd": os.path.abspath(os.path.expanduser(cwd)),
    }
    spec.update({k: v for k, v in said.items() if v is not None})
    metadata = {"project": project, **({"name": name} if name else {})}
    document = {"apiVersion": API_VERSION, "kind": "Job", "metadata": metadata, "spec": spec}
    _validate_submit(document)
    return document


def _resources(gpus: int | None, gpu_memory: str | None) -> dict[str, Any] | None:
    """`--gpus` and `--gpu-memory` as the spec says them; the size is the broker's to read."""
    said = {"gpus": gpus, "gpu_memory": gpu_memory}
    return {k: v for k, v in said.items() if v is not None} or None


def as_array(document: Document, indices: str | None, sweep: Sequence[str]) -> Document:
    """`job submit`'s Job made a JobArray by `--array` or `--sweep` (api/arrays.py): its
    members' argv get `{i}` and each `{KEY}` replaced."""
    if indices is not None and sweep:
        raise SubmitError(
            "--array and --sweep exclude each other (sweep an index as one more "
            "parameter: --sweep fold=0,1,2)"
        )
    try:
        if indices is not None:  # sent as the list the API takes
            array: dict[str, Any] = {"indices": parse_indices(indices)}
        else:
            array = {"sweep": parse_sweep(sweep)}
    except ValueError as exc:
        raise SubmitError(f"{'--array' if indices is not None else '--sweep'}: {exc}") from None
    spec = {**document["spec"], "array": array}
    return {**document, "kind": "JobArray", "spec": spec}


def _whole_seconds(seconds: float | None) -> int | None:
    """A duration as the spec holds it: whole seconds, a fraction rounded up."""
    return None if seconds is None else math.ceil(seconds)


def _command(command: Sequence[str], shell: str | None) -> list[str]:
    if shell is None:
        if not command:
            raise SubmitError("say the command to run (after --), or --shell 'CMD'")
        return list(command)
    if command:
        raise SubmitError("give --shell 'CMD' or a command after --, not both")
    if not shell.strip():
        raise SubmitError("--shell: the command is empty")
    return ["sh", "-c", shell]


def _exported(names: Sequence[str], environ: Mapping[str, str]) -> dict[str, str]:
    """The submitter's variables that `--export` names (`ALL`: every one but jobd's token)."""
    wanted = [n.strip() for spec in names for n in spec.split(",") if n.strip()]
    if "ALL" in wanted:
        return {k: v for k, v in environ.items() if k not in _NEVER_EXPORTED}
    if wanted == ["NONE"]:
        return {}
    found: dict[str, str] = {}
    for name in wanted:
        if name in _NEVER_EXPORTED:
            raise SubmitError(f"--export: {name} is jobd's own credential; no job is given it")
        if name not in environ:
            raise SubmitError(f"--export: {name} is not set in this environment")
        found[name] = environ[name]
    return found


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


def build_rerun_job(job: Document, *, name: str | None = None, env: Sequence[str] = ()) -> Document:
    """A new Job with a finished job's spec: its project and labels (plus `jobd/reruns`),
    without its dependencies (they ran); `env` sets or replaces variables. A member of a
    job array is copied as a job of its own, its index in its env (JOBD_ARRAY_INDEX).

    A spec whose env holds masked values (secrets hidden on read, or scrubbed when the job
    ended) is refused unless `env` gives each of them again: a job must not start with
    `***` where its token should be.
    """
    meta, status = job.get("metadata") or {}, job.get("status") or {}
    if status.get("phase") not in _TERMINAL:
        raise SubmitError(
            f"job {meta.get('id')} is {status.get('phase')}: rerun copies a job that has "
            "ended (wait for it, or cancel it first)"
        )
    spec = {k: v for k, v in (job.get("spec") or {}).items() if k not in _NOT_RERUN}
    member = meta.get("array") or {}  # a copy of a job array's member keeps its index
    index = {ARRAY_INDEX: str(member["index"])} if "index" in member else {}
    spec["env"] = {**(spec.get("env") or {}), **index, **_parse_env(env)}
    masked = sorted(k for k, v in spec["env"].items() if v == MASKED_VALUE)
    if masked:
        keys = ", ".join(masked)
        raise SubmitError(
            f"job {meta.get('id')}'s env holds masked values ({keys}): give each again "
            f"with --env {masked[0]}=VALUE"
        )
    labels = {**(meta.get("labels") or {}), RERUNS_LABEL: str(meta.get("id"))}
    metadata = {"project": meta.get("project") or "default", "labels": labels}
    if name:
        metadata["name"] = name
    document = {"apiVersion": API_VERSION, "kind": "Job", "metadata": metadata, "spec": spec}
    _validate_submit(document)
    return document
