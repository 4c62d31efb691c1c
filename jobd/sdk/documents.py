"""What an SDK caller says, as the documents the broker takes, and its answers as models.

No I/O: `client.Client` and `async_client.AsyncClient` send what this builds and read
what comes back through here, so the two say the same things the same way. A job is
named by a `JobRef`: its id (an int, or digits), `PROJECT/NAME`, a bare name (in the
default project, as `job` reads one), or a `Job` already read.
"""

from __future__ import annotations

import codecs
import os
import shlex
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from jobd.api.arrays import JobArray
from jobd.api.models import API_VERSION, Job, JobSpec, Resources
from jobd.api.vocabulary import DEFAULT_PROJECT, TERMINAL_PHASES
from jobd.wire.answers import Document
from jobd.wire.errors import ApiError

__all__ = [
    "JobRef",
    "Lines",
    "Selector",
    "array_document",
    "as_array",
    "as_job",
    "is_terminal",
    "job_document",
    "lines",
    "named_job",
    "ref_target",
    "selector_text",
]

JobRef = int | str | Job
Selector = str | Mapping[str, str]

_SPEC_FIELDS = frozenset(JobSpec.model_fields) - {"command", "cwd"}
_RESOURCE_FIELDS = frozenset(Resources.model_fields)


def job_document(
    command: str | Sequence[str],
    *,
    project: str | None,
    cwd: str | os.PathLike[str] | None,
    name: str | None = None,
    labels: Mapping[str, str] | None = None,
    spec_fields: Mapping[str, Any],
) -> Document:
    """A Job of `command` (argv, or a string split as a shell would, never run by one) in
    `cwd` (default: here). `spec_fields` are JobSpec's fields by name; a resource
    (`cpus`, `memory`, `gpus`, `gpu_memory`) may be said directly. Only what is said is sent, so
    every default stays the project's and the broker's; the broker checks the values."""
    argv = shlex.split(command) if isinstance(command, str) else [str(w) for w in command]
    if not argv:
        raise ValueError("the command is empty")
    spec: Document = {"command": argv, "cwd": os.path.abspath(os.fspath(cwd or "."))}
    for key, value in spec_fields.items():
        if key in _SPEC_FIELDS:
            spec[key] = value
        elif key in _RESOURCE_FIELDS:
            spec.setdefault("resources", {})[key] = value
        else:
            raise TypeError(
                f"{key!r} is no field of a job's spec nor of its resources (see docs/concepts.md)"
            )
    metadata: Document = {"project": project or DEFAULT_PROJECT}
    if name:
        metadata["name"] = name
    if labels:
        metadata["labels"] = dict(labels)
    return {"apiVersion": API_VERSION, "kind": "Job", "metadata": metadata, "spec": spec}


def array_document(
    job: Document, indices: Sequence[int], parallelism: int | None = None
) -> Document:
    """`job` made a JobArray of one member per index (each gets JOBD_ARRAY_INDEX)."""
    array: Document = {"indices": list(indices)}
    if parallelism is not None:
        array["parallelism"] = parallelism
    return {**job, "kind": "JobArray", "spec": {**job["spec"], "array": array}}


def as_job(document: Document) -> Job:
    return Job.model_validate(document)


def as_array(document: Document) -> JobArray:
    """The array as the model has it: a read's summary of its members (phases, a line per
    member) is left out of `status`, which keeps the members' ids (`jobs`)."""
    status = document.get("status") or {}
    return JobArray.model_validate({**document, "status": {"jobs": status.get("jobs", [])}})


def is_terminal(job: Job) -> bool:
    return job.status.phase in TERMINAL_PHASES


def ref_target(ref: JobRef, project: str | None) -> int | tuple[str, str]:
    """The id a ref says, or the (project, name) to look it up by."""
    if isinstance(ref, Job):
        if ref.metadata.id is None:
            raise ValueError("this Job has no id: it was never stored by a broker")
        return ref.metadata.id
    if isinstance(ref, int) and not isinstance(ref, bool):
        return ref
    if isinstance(ref, str):
        text = ref.strip()
        if text.isdigit():
            return int(text)
        where, slash, name = text.rpartition("/")
        if name:
            return (where if slash else project or DEFAULT_PROJECT), name
    raise ValueError(f"{ref!r} names no job: give its id, PROJECT/NAME or NAME")


def named_job(items: Sequence[Document], project: str, name: str) -> int:
    """The id of the one job listed for (project, name); ApiError 404 when there is none."""
    for document in items:
        meta = document.get("metadata") or {}
        if meta.get("name") == name and meta.get("project") == project:
            return int(meta["id"])
    raise ApiError(404, f"no job {project}/{name}")


def selector_text(selector: Selector | None) -> str | None:
    """A label selector as the broker reads it: `k=v,k2!=v2`, or a mapping of equalities."""
    if selector is None or isinstance(selector, str):
        return selector or None
    return ",".join(f"{key}={value}" for key, value in selector.items()) or None


class Lines:
    """Output chunks as text lines (each with its newline, as a file gives them), whatever
    the chunks' boundaries; an undecodable byte becomes U+FFFD rather than an error."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending = ""

    def feed(self, chunk: bytes) -> list[str]:
        *whole, self._pending = (self._pending + self._decoder.decode(chunk)).split("\n")
        return [line + "\n" for line in whole]

    def end(self) -> list[str]:
        rest = self._pending + self._decoder.decode(b"", final=True)
        self._pending = ""
        return [rest] if rest else []


def lines(chunks: Iterable[bytes]) -> Iterator[str]:
    """`chunks` as text lines (`Lines`)."""
    splitter = Lines()
    for chunk in chunks:
        yield from splitter.feed(chunk)
    yield from splitter.end()
