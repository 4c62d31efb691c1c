"""`job submit`'s flags turned into a Job document, before anything is sent.

Only what the user said goes into the document, so every default (priority, preemptible,
grace) stays the server's to resolve from the project. What the broker would refuse is
refused here already, in the user's terms: the flag, not the field. The spec's options
are its fields' Options (api/field_options.py); the MCP tool builds its Job here too
(`job_document`), naming its parameters instead of flags.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from jobd.api.arrays import parse_indices, parse_parallelism, parse_sweep
from jobd.api.field_options import Option, spec_options
from jobd.api.models import ADMISSION, API_VERSION, MAX_GRACE_S, Job, JobSpec
from jobd.api.vocabulary import ARRAY_INDEX

__all__ = [
    "MASKED_VALUE",
    "RERUNS_LABEL",
    "SPEC_OPTIONS",
    "FieldPath",
    "SubmitError",
    "as_array",
    "build_rerun_job",
    "build_submit_job",
    "job_document",
    "spec_value",
]

Document = dict[str, Any]
FieldPath = tuple[str, ...]
"""Where a field sits: in the spec (`("resources", "gpus")`), or in the Job for a refusal."""


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

# The spec's fields that `job submit` and the MCP tool take, from their Options.
SPEC_OPTIONS = spec_options(JobSpec)
_BY_KEYWORD = {spec.option.keyword: spec for spec in SPEC_OPTIONS}

# Which flag set each field, so a refusal talks in the user's terms.
_FLAGS: dict[FieldPath, str] = {
    ("metadata", "name"): "--name",
    ("metadata", "project"): "--project",
    ("spec", "command"): "the command",
    ("spec", "cwd"): "--cwd",
    **{("spec", *spec.path): spec.option.flag for spec in SPEC_OPTIONS},
    ("spec", "env"): "--env/--export",  # both fill it
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
    resume_from: str | None = None,
    **options: Any,
) -> Document:
    """The Job `job submit` sends: only what was said, so every default stays the server's.

    `options` are the spec's options (SPEC_OPTIONS) by their Python names, as click gives
    them: `checkpoint_grace=300`, `env=("K=V",)`, `max_runtime=7200.0`. `shell` runs
    through `sh -c` (on purpose: pipes, globs); `export` names variables of `environ` (the
    submitter's environment) to copy into the spec, or `ALL` of them, as `sbatch
    --export`; `--env` wins over an exported value.
    """
    said = _said_by_flags(options)
    _check_grace(said, _FLAGS)
    command = _command(command, shell)
    environment = _exported(export, os.environ if environ is None else environ)
    environment.update(said.pop(("env",), {}))
    if resume_from is not None:
        environment["RESUME_FROM"] = resume_from
    if environment:
        said[("env",)] = environment
    absolute = os.path.abspath(os.path.expanduser(cwd))
    return job_document(command, absolute, project, name, said, _FLAGS)


def job_document(
    command: list[str],
    cwd: str,
    project: str,
    name: str | None,
    said: Mapping[FieldPath, Any],
    names: Mapping[FieldPath, str],
) -> Document:
    """A Job of `command` in `cwd` with the spec's fields `said` (by path in the spec),
    refused here as the broker would refuse it, naming the field as the caller said it
    (`names`, by path in the Job: a flag, an MCP parameter)."""
    _check_grace(said, names)
    spec: Document = {"command": command, "cwd": cwd}
    for path, value in said.items():
        *parents, field = path
        place = spec
        for parent in parents:
            place = place.setdefault(parent, {})
        place[field] = value
    metadata = {"project": project, **({"name": name} if name else {})}
    document = {"apiVersion": API_VERSION, "kind": "Job", "metadata": metadata, "spec": spec}
    _validate_submit(document, names)
    return document


def spec_value(option: Option, value: Any, name: str) -> Any:
    """An option's value as the spec holds it, None when it says nothing: a duration in
    whole seconds (a fraction rounded up), digits among job refs as ids, `K=V` words as
    an object. `name` is the option's, for a refusal."""
    if value is None or (option.kind == "flag" and not value):
        return None
    if isinstance(value, list | tuple | dict) and not value:
        return None
    if option.kind == "duration" and isinstance(value, int | float):
        return math.ceil(value)
    if option.kind == "refs":
        return [int(r) if isinstance(r, str) and r.isdigit() else r for r in value]
    if option.kind == "urls":
        return [{"url": v} if isinstance(v, str) else v for v in value]
    if option.kind == "pairs" and not isinstance(value, Mapping):
        return _parse_env(value, name)
    return value


def _said_by_flags(options: Mapping[str, Any]) -> dict[FieldPath, Any]:
    """The spec's options as click gives them, as fields by path (what was said only)."""
    unknown = sorted(options.keys() - _BY_KEYWORD.keys())
    if unknown:
        raise TypeError(f"job submit has no option {unknown[0]!r}")
    said = {}
    for keyword, given in options.items():
        spec = _BY_KEYWORD[keyword]
        value = spec_value(spec.option, given, spec.option.flag)
        if value is not None:
            said[spec.path] = value
    return said


def _check_grace(said: Mapping[FieldPath, Any], names: Mapping[FieldPath, str]) -> None:
    """Grace past the cap, refused in the caller's words before the model says it its way."""
    grace = said.get(("checkpoint_grace_s",))
    if isinstance(grace, int | float) and not isinstance(grace, bool) and grace > MAX_GRACE_S:
        raise SubmitError(
            f"{names[('spec', 'checkpoint_grace_s')]} {grace:g} s is over the {MAX_GRACE_S} s "
            "cap on checkpoint grace"
        )


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
            text, cap = parse_parallelism(indices)
            array: dict[str, Any] = {"indices": parse_indices(text)}
            if cap is not None:
                array["parallelism"] = cap
        else:
            array = {"sweep": parse_sweep(sweep)}
    except ValueError as exc:
        raise SubmitError(f"{'--array' if indices is not None else '--sweep'}: {exc}") from None
    spec = {**document["spec"], "array": array}
    return {**document, "kind": "JobArray", "spec": spec}


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


def _parse_env(pairs: Sequence[str], flag: str = "--env") -> dict[str, str]:
    env: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SubmitError(f"{flag} expects KEY=VALUE, got {pair!r}")
        env[key] = value
    return env


def _validate_submit(document: Document, names: Mapping[FieldPath, str] = _FLAGS) -> None:
    """Refuse here what the broker would refuse, naming the flag rather than the field."""
    try:
        Job.model_validate(document, context=ADMISSION)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = tuple(str(p) for p in err["loc"])
        flag = next((f for k, f in names.items() if loc[: len(k)] == k), ".".join(loc))
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
