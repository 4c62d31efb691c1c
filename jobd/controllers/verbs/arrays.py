"""Admitting a job array: the array and every member job, in one transaction.

Each member is admitted as `job submit` would admit it (project defaults merged, parents
resolved, placement judged) from the array's spec, its argv substituted for its index
and sweep values (api/arrays.py). The store names them once the array has its id, so an
array without a name is `array-<id>` and its members `array-<id>-<index>`. Applying an
array that exists is `unchanged` when its spec is the same; arrays do not change, so a
different spec is refused (409). Next stage: the members are ordinary Pending jobs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from jobd.api.arrays import ARRAY_LABEL, JobArray, JobArraySpec, member_name
from jobd.api.models import ArrayRef, Job, JobSpec, ObjectMeta, Project, Worker
from jobd.api.secrets import DEFAULT_SECRET_ENV_KEYS, mask_env
from jobd.api.vocabulary import Phase
from jobd.api.wait_reasons import WaitReason
from jobd.controllers.clock import Clock
from jobd.controllers.context import Context
from jobd.controllers.errors import AdmissionError, TransitionError
from jobd.controllers.placement import shapes_of
from jobd.controllers.transitions import array_capped, waits
from jobd.controllers.verbs.admission import (
    ApplyResult,
    created_events,
    judge_placement,
    prepare_new_job,
    resolve_parents,
)
from jobd.controllers.verbs.cancel import cancel
from jobd.store.base import Conflict, Store

__all__ = [
    "apply_array",
    "cancel_array",
    "create_array",
    "delete_array",
    "members_of",
    "summary",
]

# The name of an array that was given none: `array-<id>`.
_GENERATED = "array"


def create_array(
    store: Store,
    array: JobArray,
    clock: Clock,
    projects: Mapping[str, Project] | None = None,
    workers: Iterable[Worker] = (),
) -> JobArray:
    """Admit and insert the array and its members; all or nothing."""
    template, parents = _checked(store, array)
    project = (projects or {}).get(array.project) or store.get_project(array.project)
    meta = ObjectMeta(
        project=array.project, labels=dict(array.metadata.labels), owner=array.metadata.owner
    )
    members = array.spec.array.members()
    parallelism = array.spec.array.parallelism
    jobs = []
    for member in members:
        spec = template.model_copy(update={"command": member.command(template.command)}, deep=True)
        job = Job(metadata=meta.model_copy(deep=True), spec=spec)
        jobs.append(prepare_new_job(job, project, clock, list(parents)))
    judge_placement(jobs, shapes_of(workers), clock)
    _assign_server_fields(array)
    array.spec = _as_stored(array.spec, project)

    def name_all(array_id: int) -> None:
        name = array.metadata.name or f"{_GENERATED}-{array_id}"
        array.metadata.name = name
        for position, (job, member) in enumerate(zip(jobs, members, strict=True)):
            job.metadata.name = member_name(name, member.index)
            job.metadata.labels[ARRAY_LABEL] = name
            job.metadata.array = ArrayRef(
                id=array_id, name=name, index=member.index, parallelism=parallelism
            )
            if parallelism is not None and position >= parallelism:
                _capped(job, parallelism, clock)

    return store.create_array(array, jobs, name_all, events_for=created_events)


def _capped(job: Job, parallelism: int, clock: Clock) -> None:
    """A member past its array's cap waits for it (unless it has a weightier reason)."""
    held = next((c for c in job.status.conditions if c.type == "Scheduled"), None)
    if held is None or held.reason == WaitReason.WAITING_FOR_CAPACITY:
        waits(job.status, WaitReason.ARRAY_PARALLELISM, array_capped(parallelism), clock.now())


def _assign_server_fields(array: JobArray) -> None:
    """The server's fields of a new array, whatever the document said of them."""
    array.metadata.project = array.project
    array.metadata.id = array.metadata.uid = array.metadata.resource_version = None
    array.metadata.created_at = array.metadata.array = None
    array.status.jobs = []


def _as_stored(spec: JobArraySpec, project: Project | None) -> JobArraySpec:
    """The spec as the array's row keeps it: secret env values masked (api/secrets.py).
    The members hold the values, and lose them when they end, as every job does."""
    patterns = DEFAULT_SECRET_ENV_KEYS + tuple(project.spec.secret_env_keys if project else ())
    env = mask_env(spec.env, patterns)
    return spec if env is spec.env else spec.model_copy(update={"env": env})


def _checked(store: Store, array: JobArray) -> tuple[JobSpec, list[int]]:
    """The members' spec before substitution, and their parents (the same for each);
    MissingParent (404) for a parent not stored."""
    template = JobSpec.model_validate(array.spec.model_dump(exclude={"array"}))
    probe = Job(metadata=ObjectMeta(project=array.project), spec=template)
    parents, _ = resolve_parents(store, probe, 0, {})
    return template, parents


def apply_array(store: Store, array: JobArray, clock: Clock, dry_run: bool) -> ApplyResult:
    """Create the array, or say it is unchanged; an array of that name with another spec
    is refused (409): arrays do not change."""
    if not array.metadata.name:
        raise AdmissionError("metadata.name: required to apply a JobArray")
    live = store.get_array_by_name(array.project, array.metadata.name)
    if live is None:
        if dry_run:
            _checked(store, array)
            return ApplyResult("JobArray", array.ref, "created", array)
        return ApplyResult("JobArray", array.ref, "created", create_array(store, array, clock))
    same_spec = live.spec == _as_stored(array.spec, store.get_project(array.project))
    if same_spec and live.metadata.labels == array.metadata.labels:
        return ApplyResult("JobArray", array.ref, "unchanged", live)
    raise Conflict(
        f"spec: array {array.ref} (A{live.id}) exists with another spec; an array does not "
        f"change: delete it (job delete A{live.id}) or apply it under a new name"
    )


def members_of(store: Store, array: JobArray) -> list[Job]:
    """The array's member jobs still stored, in index order."""
    return store.get_jobs(array.status.jobs)


def cancel_array(ctx: Context, array: JobArray) -> list[Job]:
    """Cancel every member that has not ended nor been cancelled already, in one commit;
    those are left as they are. Returns the members cancelled."""
    cancelled = []
    with ctx.store.batch(durable=True):
        for job in members_of(ctx.store, array):
            status = job.status
            if status.phase.terminal or status.desired_phase == Phase.CANCELLED:
                continue
            try:
                cancelled.append(cancel(ctx, job))
            except (TransitionError, Conflict):  # ending as we look: left as it is
                continue
    return cancelled


def delete_array(store: Store, array: JobArray) -> list[Job]:
    """Remove an array whose members have all ended, with those members (each as `job
    delete` does), in one commit. A live member refuses it all (409)."""
    members = members_of(store, array)
    live = [j for j in members if not j.status.phase.terminal]
    if live:
        raise TransitionError(
            f"array A{array.id}: job {live[0].id} is {live[0].status.phase}; cancel the "
            f"array first (job cancel A{array.id}), then delete it"
        )
    with store.batch(durable=True):
        for job in members:
            store.delete_job(job)
        store.delete_array(array)
    return members


def summary(array: JobArray, members: list[Job]) -> dict[str, Any]:
    """The array's status as a read shows it: its members' ids, how many are in each phase,
    and a line per member still stored (id, name, index, phase, exit code)."""
    phases: dict[str, int] = {}
    for job in members:
        phases[job.status.phase.value] = phases.get(job.status.phase.value, 0) + 1
    return {
        "jobs": array.status.jobs,
        "size": len(array.status.jobs),
        "phases": phases,
        "members": [_member_line(job) for job in members],
    }


def _member_line(job: Job) -> dict[str, Any]:
    ref = job.metadata.array
    return {
        "id": job.id,
        "name": job.metadata.name,
        "index": ref.index if ref else None,
        "phase": job.status.phase.value,
        "exit_code": job.status.exit_code,
    }
