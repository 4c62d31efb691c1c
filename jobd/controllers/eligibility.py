"""Eligibility: whether a worker may take a job at all, whatever it has free.

Three rules, each a job's own word on where it runs (api/models.py JobSpec): its pin
(`worker`), its `node_selector` (equal labels) and `node_affinity` (Kubernetes'
matchExpressions), and its `cwd`, which must lie under one of the worker's `mount_roots`
when the worker names any (a directory that exists only on some hosts). A fourth is the
host's: a job of an owner goes only where that user exists (the worker's published
`status.users`, worker/owners.py; `knows_owner`, `owner_refusal`). Pure functions
of the specs: the capacity model (capacity.py) skips ineligible workers, and placement
(placement.py) says, when no worker is eligible, which rule kept each out.
"""

from __future__ import annotations

import posixpath
from collections.abc import Container, Mapping, Sequence

from jobd.api.labels import expression_holds
from jobd.api.models import JobSpec, WorkerSpec

__all__ = [
    "admits",
    "asks_where",
    "eligible",
    "knows_owner",
    "owner_refusal",
    "under_a_root",
    "why_not",
]


def asks_where(spec: JobSpec) -> bool:
    """Whether the job restricts its workers beyond what mount roots say."""
    return bool(spec.worker or spec.node_selector or spec.node_affinity)


def eligible(spec: JobSpec, name: str, worker: WorkerSpec) -> bool:
    """Whether worker `name` of this spec may take the job (the capacity model's test)."""
    if not worker.mount_roots and not asks_where(spec):
        return True  # the common case, on the scheduler's hot path: nothing to check
    return admits(spec, name, worker.labels, worker.mount_roots)


def admits(spec: JobSpec, name: str, labels: Mapping[str, str], mount_roots: Sequence[str]) -> bool:
    """why_not's rules without its words: this runs for every queued job and worker."""
    if spec.worker is not None and spec.worker != name:
        return False
    if any(labels.get(key) != value for key, value in spec.node_selector.items()):
        return False
    if not all(expression_holds(labels, e.key, e.operator, e.values) for e in spec.node_affinity):
        return False
    return not mount_roots or under_a_root(spec.cwd, mount_roots)


def why_not(
    spec: JobSpec, name: str, labels: Mapping[str, str], mount_roots: Sequence[str]
) -> str | None:
    """Which rule keeps the job from worker `name`, in a few words; None: none does."""
    if spec.worker is not None and spec.worker != name:
        return f"the job is pinned to {spec.worker}"
    for key, value in spec.node_selector.items():
        have = labels.get(key)
        if have != value:
            return f"label {key}={have}, not {value}" if have is not None else f"no label {key}"
    for e in spec.node_affinity:
        if not expression_holds(labels, e.key, e.operator, e.values):
            said = f" {', '.join(e.values)}" if e.values else ""
            return f"label {e.key} is not {e.operator}{said}"
    if mount_roots and not under_a_root(spec.cwd, mount_roots):
        return f"cwd {spec.cwd} is under none of its mount roots ({', '.join(mount_roots)})"
    return None


def knows_owner(owner: str | None, users: Container[str] | None) -> bool:
    """Whether a worker publishing `users` may run a job of `owner`: a job of no owner
    runs anywhere, and a worker publishing none (None) takes any owner."""
    return owner is None or users is None or owner in users


def owner_refusal(owner: str | None, users: Container[str] | None) -> str | None:
    """Why a worker publishing `users` may not run a job of `owner`, in a few words."""
    return None if knows_owner(owner, users) else f"user {owner} does not exist on this host"


def under_a_root(cwd: str | None, roots: Sequence[str]) -> bool:
    """Whether `cwd` is one of `roots` or below one (by path components, not by prefix:
    /data2 is not under /data). No cwd said: the job runs wherever it lands."""
    if cwd is None:
        return True
    path = posixpath.normpath(cwd)
    return any(
        path == (root := posixpath.normpath(r)) or path.startswith(root.rstrip("/") + "/")
        for r in roots
    )
