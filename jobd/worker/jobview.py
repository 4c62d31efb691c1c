"""The agent's view of a Job: the fields it reads, taken from the watch's JSON as they are.

The broker validated every document it stored, and the watch hands them on as JSON: the
agent has no need to validate them again into the broker's pydantic `Job`, which with
pydantic itself was ~10 MiB of the agent's memory and 3-4 % of its CPU in a drain
(docs/performance.md). A `JobView` reads what the agent, its hooks and the workload's
environment use, with the model's defaults for what a document leaves out; `document` is
the whole JSON for anything else. A document without what every job has (its id, a spec
with a command) is refused with `UnreadableJob`, naming what is missing.
Next stage: the agent's reconcile (agent.py) and one Execution per attempt.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jobd.api.vocabulary import DEFAULT_PROJECT, Phase

__all__ = ["JobView", "MemberView", "UnreadableJob"]


class UnreadableJob(ValueError):
    """A watched document that is no job (a field every job has is missing or mistyped)."""


def _object(document: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = document.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise UnreadableJob(f"{key} is not an object")
    return value


class ArrayView:
    __slots__ = ("id", "index")

    def __init__(self, array: Mapping[str, Any]) -> None:
        self.id: int = int(array["id"])
        self.index: int = int(array["index"])


class MetadataView:
    __slots__ = ("array", "id", "name", "owner", "project")

    def __init__(self, metadata: Mapping[str, Any]) -> None:
        if not isinstance(metadata.get("id"), int):
            raise UnreadableJob("metadata.id is missing")
        self.id: int = metadata["id"]
        self.name: str | None = metadata.get("name")
        self.project: str | None = metadata.get("project")
        self.owner: str | None = metadata.get("owner")  # whom a root worker runs it as
        array = metadata.get("array")
        self.array: ArrayView | None = None if array is None else ArrayView(array)


class ResourcesView:
    """What a job holds here: GPUs, and the cores and memory its limits say (None: none)."""

    __slots__ = ("cpus", "gpus", "memory")

    def __init__(self, resources: Mapping[str, Any]) -> None:
        cpus, memory = resources.get("cpus"), resources.get("memory")
        self.cpus: float | None = None if cpus is None else float(cpus)
        self.memory: int | None = None if memory is None else int(memory)
        self.gpus: int = int(resources.get("gpus") or 0)


class SpecView:
    __slots__ = ("command", "cwd", "env", "resources")

    def __init__(self, spec: Mapping[str, Any]) -> None:
        command = spec.get("command")
        if not isinstance(command, list) or not command:
            raise UnreadableJob("spec.command is missing")
        self.command: list[str] = [str(word) for word in command]
        self.cwd: str | None = spec.get("cwd")
        self.env: dict[str, str] = dict(spec.get("env") or {})
        self.resources = ResourcesView(_object(spec, "resources"))


class EffectiveView:
    __slots__ = ("checkpoint_grace_s", "secret_env_keys")

    def __init__(self, effective: Mapping[str, Any]) -> None:
        grace = effective.get("checkpoint_grace_s")
        self.checkpoint_grace_s: float | None = None if grace is None else float(grace)
        self.secret_env_keys: list[str] | None = effective.get("secret_env_keys")


class MemberView:
    """One member (rank) of a multi-host job: its worker, address, phase and GPUs."""

    __slots__ = ("address", "gpus", "phase", "rank", "worker")

    def __init__(self, member: Mapping[str, Any]) -> None:
        self.rank: int = int(member["rank"])
        self.worker: str = str(member["worker"])
        self.address: str | None = member.get("address")
        self.phase = Phase(member.get("phase") or Phase.SCHEDULED)
        self.gpus: list[int] = [int(g) for g in member.get("gpus") or ()]


class StatusView:
    __slots__ = (
        "attempt",
        "effective",
        "gpus",
        "master_port",
        "members",
        "phase",
        "resume_from",
        "resume_from_ranks",
        "retries",
        "signal",
        "worker",
    )

    def __init__(self, status: Mapping[str, Any]) -> None:
        self.phase = Phase(status.get("phase") or Phase.PENDING)
        self.worker: str | None = status.get("worker")
        self.signal: str | None = status.get("signal")
        self.attempt: int = int(status.get("attempt") or 0)
        self.retries: int = int(status.get("retries") or 0)
        self.resume_from: str | None = status.get("resume_from")
        self.resume_from_ranks: dict[str, str] = dict(status.get("resume_from_ranks") or {})
        self.gpus: list[int] = [int(g) for g in status.get("gpus") or ()]
        self.effective = EffectiveView(_object(status, "effective"))
        # A multi-host job's members by rank (empty for a job of one node), and the port
        # rank 0 chose for the others to reach it (None until it has).
        members = status.get("members")
        self.members = [MemberView(m) for m in members] if members else []
        port = status.get("master_port")
        self.master_port: int | None = None if port is None else int(port)


class JobView:
    """What the agent reads of one job, from its JSON document (as the watch gives it)."""

    __slots__ = ("document", "metadata", "spec", "status")

    def __init__(self, document: Mapping[str, Any]) -> None:
        self.document = document
        try:
            self.metadata = MetadataView(_object(document, "metadata"))
            self.spec = SpecView(_object(document, "spec"))
            self.status = StatusView(_object(document, "status"))
        except (KeyError, TypeError, ValueError) as exc:
            if isinstance(exc, UnreadableJob):
                raise
            raise UnreadableJob(f"{type(exc).__name__}: {exc}") from exc

    @property
    def id(self) -> int:
        return self.metadata.id

    @property
    def project(self) -> str:
        return self.metadata.project or DEFAULT_PROJECT

    def member(self, worker: str) -> MemberView | None:
        """The member of a multi-host job that `worker` runs (None: none, or a job of one
        node)."""
        return next((m for m in self.status.members if m.worker == worker), None)

    def bound_here(self, worker: str) -> bool:
        """Whether `worker` runs this job (a gang: one of its members)."""
        return self.status.worker == worker or self.member(worker) is not None

    def __repr__(self) -> str:
        return f"JobView(id={self.id}, phase={self.status.phase})"
