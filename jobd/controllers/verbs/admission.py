"""Admission: turning what a user sent into a stored job, and server-side apply.

A new job gets its project's defaults merged field by field under its own values
(`None` means "not said"), its `depends_on` resolved to job ids, and a fresh status.
Apply matches documents by project and name and decides created / configured /
unchanged; a refused document changes nothing. A secret env value sent back as the mask
reads show (api/secrets.py) keeps the stored value; as a new job's value it is refused.
Next stage: the lifecycle controller decides whether its dependencies are met, then the
scheduler binds it.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from jobd.api.arrays import JobArray, array_id_of
from jobd.api.models import (
    RUN_LIMITS,
    Effective,
    Job,
    JobSpec,
    JobStatus,
    Phase,
    Project,
    ProjectDefaults,
    Worker,
    assign,
    set_condition,
)
from jobd.api.secrets import MASK, masked_keys, patterns_of, secret_keys
from jobd.api.wait_reasons import WaitReason
from jobd.controllers.clock import Clock
from jobd.controllers.errors import AdmissionError, MissingParent, TransitionError
from jobd.controllers.placement import UNSCHEDULABLE, Shape, placement_message, shapes_of
from jobd.controllers.transitions import PARENTS_WAITED, waits
from jobd.store.base import Conflict, EventRecord, Store

__all__ = [
    "AdmissionError",
    "ApplyResult",
    "apply_jobs",
    "apply_project",
    "create_jobs",
    "created_events",
    "judge_placement",
    "prepare_new_job",
    "refuse_masks",
    "refuse_pinned_gang",
    "refuse_relative_cwd",
    "refuse_root_owner",
    "resolve_effective",
    "resolve_parents",
]

Action = Literal["created", "configured", "unchanged"]


@dataclass
class ApplyResult:
    kind: str
    name: str
    action: Action
    obj: Job | Project | JobArray


def resolve_effective(job: Job, project: Project | None) -> Effective:
    """Job's own value > project default > global default, field by field."""
    return Effective(**_effective_values(job, project))


def _effective_values(job: Job, project: Project | None) -> dict[str, Any]:
    spec = job.spec
    defaults = project.spec.defaults if project else None
    priority = (
        spec.priority if spec.priority is not None else (project.spec.priority if project else 0)
    )
    preemptible = spec.preemptible
    if preemptible is None:
        preemptible = bool(defaults and defaults.preemptible)
    grace = spec.checkpoint_grace_s
    if grace is None and defaults is not None:
        grace = defaults.checkpoint_grace_s
    secret = list(project.spec.secret_env_keys) if project else None
    return {
        "priority": priority,
        "preemptible": preemptible,
        "checkpoint_grace_s": grace,
        "secret_env_keys": secret or None,
        **_run_limits(spec, defaults),
    }


def _run_limits(spec: JobSpec, defaults: ProjectDefaults | None) -> dict[str, int | None]:
    """Each guard and the TTL: the job's own, else its project's default, else None."""
    limits: dict[str, int | None] = {}
    for name in RUN_LIMITS:
        own = getattr(spec, name)
        limits[name] = own if own is not None or defaults is None else getattr(defaults, name)
    return limits


def _find_parents(store: Store, project: str, ref: int | str) -> list[int] | None:
    """The job a ref names, or every member of the array it names (`A12`, or a name no
    job of the project has); None when it names nothing stored."""
    if isinstance(ref, int) or ref.isdigit():
        found = store.get_job(int(ref))
    else:
        array_id = array_id_of(ref)
        if array_id is not None:
            return _members(store, store.get_array(array_id))
        found = store.get_job_by_name(project, ref)
        if found is None:
            return _members(store, store.get_array_by_name(project, ref))
    return [found.id] if found else None


def _members(store: Store, array: JobArray | None) -> list[int] | None:
    """The ids of the array's members still stored (a deleted one is no parent, as a
    deleted job is none); None for no array, or one whose members are all gone."""
    if array is None:
        return None
    return [job.id for job in store.get_jobs(array.status.jobs)] or None


def resolve_parents(
    store: Store, job: Job, position: int, batch: dict[str, int]
) -> tuple[list[int], list[int]]:
    """Parents already stored (ids) and parents earlier in the same batch (positions)."""
    if not job.spec.depends_on:
        return [], []
    stored: list[int] = []
    local: list[int] = []
    for ref in job.spec.depends_on:
        key = f"{job.project}/{ref}"
        if key in batch:
            if batch[key] >= position:
                raise Conflict(  # as above: valid alone, in conflict together
                    f"spec.depends_on: {ref!r} must come before {job.ref} in the same apply"
                )
            local.append(batch[key])
            continue
        parents = _find_parents(store, job.project, ref)
        if parents is None:
            raise MissingParent(
                f"spec.depends_on: no job or array {ref!r} in project {job.project!r} "
                "(parents must exist before their children)"
            )
        stored.extend(parents)
    return sorted(set(stored)), local


def _positions(jobs: list[Job]) -> dict[str, int]:
    """Where each named job stands in a batch, for the parents named in it; {} if none."""
    if not any(j.spec.depends_on for j in jobs):
        return {}
    return {j.ref: i for i, j in enumerate(jobs) if j.metadata.name}


def prepare_new_job(job: Job, project: Project | None, clock: Clock, parents: list[int]) -> Job:
    """`job`, made ready to insert in place: server fields reset, defaults merged.

    The job is the caller's own, freshly parsed or built (a copy per job cost more than
    the job's rows). Preparing it again, as a create retried alone does, gives the same.
    """
    assign(
        job.metadata,
        project=job.project,
        id=None,
        uid=None,
        resource_version=None,
        created_at=None,
        generation=1,
        array=None,  # the server's to say (verbs/arrays.py), never a document's
    )
    if "status" in job.model_fields_set:  # a status the user sent is not the server's
        job.status = JobStatus()
    assign(job.status.effective, **_effective_values(job, project))
    refuse_masks(job)
    refuse_relative_cwd(job)
    refuse_pinned_gang(job)
    now = clock.now()
    assign(
        job.status,
        parents=parents,
        dependencies_met=not parents,
        queued_at=now,
        observed_generation=1,
    )
    if parents:
        set_condition(job.status, "DependenciesMet", False, "Waiting", "waiting for parents")
        waits(job.status, WaitReason.WAITING_FOR_DEPENDENCIES, PARENTS_WAITED, now)
    # Else no condition yet: a ready Pending job that says no reason waits for room
    # (WaitingForCapacity, api/wait_reasons.py), bound by the scheduler's next pass if a
    # worker has it. Most jobs are bound at once; writing the condition into every
    # admitted job's document cost apply 8 % of its CPU (docs/performance.md).
    return job


def refuse_masks(job: Job) -> None:
    """AdmissionError when a secret env value of `job` (its effective patterns resolved) is
    the mask: that is what a masked read gave back, or a finished job kept, not a value."""
    masked = masked_keys(job)
    if masked:
        raise AdmissionError(
            f"spec.env.{masked[0]}: {MASK!r} is how jobd shows a secret value, not a value; "
            "give the real one (a finished job's secrets are removed when it ends)"
        )
    for i, target in enumerate(job.spec.notify):
        for field in ("url", "secret"):
            if getattr(target, field) == MASK:
                raise AdmissionError(
                    f"spec.notify.{i}.{field}: {MASK!r} is how jobd shows a webhook's "
                    f"{field}, not a value; give the real one"
                )


ROOT = "root"


def refuse_root_owner(
    resource: Job | JobArray, project: Project | None, trusted: str | None = None
) -> None:
    """AdmissionError for a job (or array) of root whose project does not set
    `allow_root`: a root worker would run it as root (worker/owners.py). `trusted`: the
    one user `jobd dev` serves, whose own jobs run as that user anyway, root or not."""
    owner = resource.metadata.owner
    if owner != ROOT or owner == trusted or (project is not None and project.spec.allow_root):
        return
    raise AdmissionError(
        f"metadata.owner: jobs of root may not run in project {resource.project!r}, which "
        "does not set spec.allow_root: submit as another user, or set allow_root: true "
        "on the project"
    )


def refuse_relative_cwd(job: Job) -> None:
    """AdmissionError for a relative `spec.cwd`: relative to what, the worker cannot know
    (`job` makes one absolute where it runs; a worker resolved `../..` in its own)."""
    cwd = job.spec.cwd
    if cwd and not cwd.startswith("/"):
        raise AdmissionError(
            f"spec.cwd: {cwd!r} is not an absolute path: give the directory from / "
            "(job submit and job apply make a relative one absolute where they run)"
        )


def refuse_pinned_gang(job: Job) -> None:
    """AdmissionError for a job of several nodes pinned to one worker: each member runs
    on a different worker, so a pin could only ever place one of them."""
    spec = job.spec
    if spec.nodes > 1 and spec.worker is not None:
        raise AdmissionError(
            f"spec.worker: a job of {spec.nodes} nodes runs one member on each of "
            f"{spec.nodes} different workers, so it cannot be pinned to {spec.worker!r}: "
            "leave the pin out (job submit --worker), or choose workers by their labels "
            "(spec.node_selector, --selector)"
        )


def create_jobs(
    store: Store,
    jobs: list[Job],
    clock: Clock,
    projects: Mapping[str, Project] | None = None,
    workers: Iterable[Worker] = (),
    shapes: Collection[Shape] | None = None,
) -> list[Job]:
    """Admit and insert jobs in one transaction; all or nothing.

    A job may depend on one that comes earlier in the same batch (by name); those links
    are made once the store has given the batch its ids. Given the registered `workers`
    (or their `shapes`, which the broker's view keeps), a job none of them could run is
    said Unschedulable at once (placement.py).
    """
    batch = _positions(jobs)
    if projects is None:  # the broker passes its view's; others read the store
        projects = {name: p for name in {j.project for j in jobs} if (p := store.get_project(name))}
    prepared, local_links = [], {}
    for i, job in enumerate(jobs):
        stored, local = resolve_parents(store, job, i, batch)
        marker = [-1] if local else []  # keeps dependencies_met False until linked
        prepared.append(prepare_new_job(job, projects.get(job.project), clock, stored + marker))
        if local:
            local_links[i] = local
    judge_placement(prepared, shapes_of(workers) if shapes is None else shapes, clock)

    def link(created: list[Job]) -> None:
        for i, positions in local_links.items():
            known = [p for p in created[i].status.parents if p >= 0]
            created[i].status.parents = sorted(set(known) | {created[p].id for p in positions})

    return store.create_jobs(prepared, events_for=created_events, on_ids=link)


def judge_placement(jobs: list[Job], shapes: Collection[Shape], clock: Clock) -> None:
    rooted = any(s.mount_roots for s in shapes)
    for job in jobs:
        message = placement_message(job.spec, shapes, rooted, job.metadata.owner)
        if message is not None:
            set_condition(job.status, "Scheduled", False, UNSCHEDULABLE, message, now=clock.now())


def created_events(job: Job) -> list[EventRecord]:
    events = [
        EventRecord(
            "job_created",
            job=job.id,
            fields={
                "project": job.project,
                "name": job.metadata.name,
                "priority": job.status.effective.priority,
            },
        )
    ]
    for cond in job.status.conditions:
        if cond.type == "Scheduled" and cond.reason == UNSCHEDULABLE:
            events.append(
                EventRecord("job_unschedulable", job=job.id, fields={"message": cond.message})
            )
    return events


def apply_jobs(store: Store, jobs: list[Job], clock: Clock, dry_run: bool) -> list[ApplyResult]:
    """Server-side apply for a batch of jobs; validation runs over all before any write."""
    results: list[ApplyResult] = []
    new: list[Job] = []
    updates: list[Job] = []
    seen: set[str] = set()
    live_jobs = _live_by_ref(store, jobs)
    projects: dict[str, Project | None] = {}
    for job in jobs:
        if not job.metadata.name:
            raise AdmissionError(
                "metadata.name: required to apply a Job (job submit generates one)"
            )
        ref = job.ref
        if ref in seen:
            # 409: each document is valid alone; together they conflict.
            raise Conflict(f"metadata.name: {ref} appears twice in one apply")
        seen.add(ref)
        live = live_jobs.get(ref)
        if live is None:
            if job.project not in projects:
                projects[job.project] = store.get_project(job.project)
            # Resolved now, so a dry run's answer masks as the stored job's would.
            assign(job.status.effective, **_effective_values(job, projects[job.project]))
            refuse_masks(job)
            refuse_relative_cwd(job)
            refuse_pinned_gang(job)
            new.append(job)
            results.append(ApplyResult("Job", ref, "created", job))
            continue
        merged = _merge_into_live(live, job, store.get_project(job.project))
        action: Action = "unchanged" if merged is live else "configured"
        results.append(ApplyResult("Job", ref, action, merged))
        if merged is not live:
            updates.append(merged)
    _check_parents(store, new)
    if dry_run:
        return results
    if new:  # created in place: a created result's object is already the stored job
        create_jobs(store, new, clock)
    stored = {j.ref: store.update_job(j, durable=True) for j in updates}
    for res in results:
        res.obj = stored.get(res.name, res.obj)
    return results


def _live_by_ref(store: Store, jobs: list[Job]) -> dict[str, Job]:
    """The stored jobs that these documents name, looked up a project at a time."""
    names: dict[str, list[str]] = {}
    for job in jobs:
        if job.metadata.name:
            names.setdefault(job.project, []).append(job.metadata.name)
    live = {}
    for project, wanted in names.items():
        for name, found in store.get_jobs_by_name(project, wanted).items():
            live[f"{project}/{name}"] = found
    return live


def _check_parents(store: Store, new: list[Job]) -> None:
    """Refuse before any write (and in a dry run) what create_jobs would refuse."""
    batch = _positions(new)
    for i, job in enumerate(new):
        resolve_parents(store, job, i, batch)


def _kept_secrets(spec: JobSpec, live: Job) -> JobSpec:
    """`spec` with the live job's secret values where the document cannot say them.

    A masked read applied back holds MASK for each secret value (`job get -o yaml | job
    apply -f -`): the stored value stays. A finished job holds MASK itself (its secrets
    were scrubbed): any value the document gives compares equal, so applying its manifest
    again is `unchanged`, as before it ended.
    """
    env, stored = spec.env, live.spec.env
    kept = {
        key: stored[key]
        for key in secret_keys(env, patterns_of(live))
        if key in stored and MASK in (env[key], stored[key]) and env[key] != stored[key]
    }
    update: dict[str, object] = {"env": env | kept} if kept else {}
    if _notify_as_read(spec, live):
        update["notify"] = live.spec.notify
    return spec.model_copy(update=update) if update else spec


def _notify_as_read(spec: JobSpec, live: Job) -> bool:
    """`spec.notify` is the live job's as a masked read shows it: the stored targets stay."""
    said, stored = spec.notify, live.spec.notify
    return (
        bool(said)
        and len(said) == len(stored)
        and all(
            t.url == MASK and t.on == s.on and t.format == s.format
            for t, s in zip(said, stored, strict=True)
        )
    )


def _merge_into_live(live: Job, desired: Job, project: Project | None) -> Job:
    """The live job with the desired spec and labels; `live` itself when nothing changes."""
    desired_spec = _kept_secrets(desired.spec, live)
    same_spec = live.spec == desired_spec
    same_labels = live.metadata.labels == desired.metadata.labels
    if same_spec and same_labels:
        return live
    if desired.metadata.resource_version not in (None, live.metadata.resource_version):
        raise Conflict(
            f"job {live.ref} was changed since resource_version {desired.metadata.resource_version}"
        )
    if not same_spec and live.status.phase != Phase.PENDING:
        # 409, not 422: the same document is admitted while the job is Pending.
        raise TransitionError(
            f"spec: job {live.ref} is {live.status.phase}; only a Pending job's spec can change "
            "(delete it, or apply it under a new name)"
        )
    merged = live.model_copy(deep=True)
    merged.metadata.labels = dict(desired.metadata.labels)
    if not same_spec:
        if merged.spec.depends_on != desired.spec.depends_on:
            # 409, not 422: a valid document, refused for the job it would change.
            raise TransitionError(f"spec.depends_on: cannot change the parents of {live.ref}")
        merged.spec = desired_spec.model_copy(deep=True)
        merged.metadata.generation += 1
        merged.status.observed_generation = merged.metadata.generation
        merged.status.effective = resolve_effective(merged, project)
        refuse_masks(merged)
        refuse_relative_cwd(merged)
        refuse_pinned_gang(merged)
    return merged


def apply_project(store: Store, project: Project, dry_run: bool) -> ApplyResult:
    live = store.get_project(project.name)
    if live is None:
        if not dry_run:
            project = store.put_project(_fresh_project(project))
        return ApplyResult("Project", project.name, "created", project)
    if live.spec == project.spec and live.metadata.labels == project.metadata.labels:
        return ApplyResult("Project", project.name, "unchanged", live)
    merged = live.model_copy(deep=True)
    merged.spec = project.spec.model_copy(deep=True)
    merged.metadata.labels = dict(project.metadata.labels)
    merged.metadata.generation += 1
    if not dry_run:
        merged = store.put_project(merged)
    return ApplyResult("Project", project.name, "configured", merged)


def _fresh_project(project: Project) -> Project:
    fresh = project.model_copy(deep=True)
    for field in ("id", "uid", "resource_version", "created_at", "project"):
        setattr(fresh.metadata, field, None)
    # The broker counts generations: one a client sent (2^53 - 1, say) would be carried on
    # and soon past what a store and a reader accept.
    fresh.metadata.generation = 0
    return fresh
