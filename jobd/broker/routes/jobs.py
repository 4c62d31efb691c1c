"""User-facing job routes: create, apply, list, get, delete, and the verbs on a job."""

from __future__ import annotations

import gc
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Annotated, Any, cast

from fastapi import APIRouter, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, Field, ValidationError

from jobd.api.arrays import JobArray
from jobd.api.manifests import Document, ManifestError, parse_resource
from jobd.api.models import ADMISSION, Job, Phase, Project, Resource
from jobd.api.selectors import parse_selector
from jobd.broker.auth import access
from jobd.broker.auth.access import Forbidden, principal_of
from jobd.broker.auth.tokens import Principal
from jobd.broker.http.fastpath import FastRoute, PathArgs, declare, parse_value
from jobd.broker.http.responses import doc, encode_json, json_response, validation_detail
from jobd.broker.http.routing import route
from jobd.broker.state import BrokerState, job_or_404, state_of
from jobd.controllers.errors import AdmissionError, TransitionError
from jobd.controllers.explain import Cluster, Queue, explain
from jobd.controllers.verbs import admission, arrays, preempt
from jobd.controllers.verbs.cancel import cancel
from jobd.controllers.verbs.placing_new import NewRoom, one_commit, place_new, room_for_new
from jobd.controllers.verbs.resume import resume_job
from jobd.store.base import NotFound, Store
from jobd.wire import routes
from jobd.wire.models import (
    ApplyDocuments,
    ApplyQuery,
    ApplyRequest,
    BlockersQuery,
    JobsQuery,
    LogsQuery,
    ResumeQuery,
)

router = APIRouter(tags=["jobs"])


class _ApplyJobs(ApplyRequest):
    """An apply of Jobs only, the common case: validated in one pass of pydantic's core."""

    documents: list[Job] = Field(min_length=1)  # type: ignore[assignment]


def _apply_body(raw: bytes) -> tuple[list[Resource | JobArray], bool]:
    """The documents of an apply and its dry_run flag.

    Jobs that each say `kind: Job` take the one-pass path; anything else (projects, a
    missing kind, an invalid document) is parsed a document at a time, which names the
    document and field of the first error. Either way a document's JSON types are taken
    as they are, as every request body's (fastpath.parse_body): `"1"` is no number.
    """
    try:
        jobs = _ApplyJobs.model_validate_json(raw, strict=True, context=ADMISSION)
    except ValidationError:
        pass
    else:
        if all("kind" in job.model_fields_set for job in jobs.documents):
            return list(jobs.documents), jobs.dry_run
    try:
        body = ApplyRequest.model_validate_json(raw, context=ADMISSION)
    except ValidationError as exc:
        raise RequestValidationError(exc.errors()) from None
    resources = [_document(doc, f"document {i + 1}") for i, doc in enumerate(body.documents)]
    return resources, body.dry_run


def _document(data: dict[str, Any], source: str) -> Resource | JobArray:
    """One document, its errors named by manifests' reader, then its types checked strictly
    (the reader's own rules are a YAML file's, which may say `priority: "5"`)."""
    resource = parse_resource(Document(data, source, 1))
    if isinstance(resource, JobArray):  # also a Job with `spec.array`
        data = {**data, "kind": "JobArray"}
    try:
        parse_value(type(resource), data)
    except ValidationError as exc:
        raise ManifestError(f"{source}:1: {validation_detail(exc.errors())}") from None
    return resource


def _json_body(model: type[BaseModel]) -> dict[str, Any]:
    """OpenAPI for a body the route parses itself (pydantic's JSON parser, in Rust)."""
    schema = model.model_json_schema(by_alias=True)
    schema = {"schema": _inlined(schema, schema.pop("$defs", {}))}
    return {"requestBody": {"content": {"application/json": schema}, "required": True}}


def _inlined(schema: Any, defs: dict[str, Any]) -> Any:
    """`schema` with each `#/$defs/X` replaced by X itself: a schema that stands alone
    inside the OpenAPI document (the models it uses refer to none of their own kind)."""
    if isinstance(schema, dict):
        ref = schema.get("$ref", "")
        if ref.startswith("#/$defs/"):
            return _inlined(defs[ref.removeprefix("#/$defs/")], defs)
        return {k: _inlined(v, defs) for k, v in schema.items()}
    if isinstance(schema, list):
        return [_inlined(v, defs) for v in schema]
    return schema


@route(router, routes.APPLY, openapi_extra=_json_body(ApplyDocuments))
async def apply(request: Request, query: Annotated[ApplyQuery, Query()]) -> Response:
    body = await request.body()
    who = principal_of(request)
    state = state_of(request)
    with _collector_paused():  # off the loop (PostgreSQL), other requests run meanwhile
        text = await state.ctx.runner.run_prepared(
            lambda: room_for_new(state.ctx),
            lambda plan: _apply(state, body, query.objects, who, plan),
        )
    return Response(text, media_type="application/json")


def _apply(
    state: BrokerState, raw: bytes, objects: bool, who: Principal, plan: NewRoom | None = None
) -> str:
    """The apply's answer, as JSON text. Everything else it made is gone when it returns.
    Its new jobs that `plan`'s room takes are bound in their create's commit
    (placing_new.py), unless it writes projects or arrays too (which the room, read
    before, does not know): those are the pass's."""
    resources, dry_run = _apply_body(raw)
    projects = [r for r in resources if isinstance(r, Project)]
    jobs = [r for r in resources if isinstance(r, Job)]
    job_arrays = [r for r in resources if isinstance(r, JobArray)]
    if len(jobs) + len(projects) + len(job_arrays) != len(resources):
        raise AdmissionError("kind: Worker documents are written by workers only")
    if any(p.metadata.name is None for p in projects):
        raise AdmissionError("metadata.name: required to apply a Project")
    _may_apply(who, projects, [*jobs, *job_arrays])
    _may_change_live(state, who, jobs)
    made: list[Job | JobArray] = [*jobs, *job_arrays]
    for resource in made:
        access.stamp_owner(who, resource)
    _refuse_root(state, made, *projects)
    clock = state.ctx.clock
    if projects or job_arrays:  # refuse before writing anything: a bad job must not
        admission.apply_jobs(state.store, jobs, clock, dry_run=True)  # leave the others
        for array in job_arrays:
            arrays.apply_array(state.store, array, clock, dry_run=True)
    results = [admission.apply_project(state.store, p, dry_run) for p in projects]
    results += [arrays.apply_array(state.store, a, clock, dry_run) for a in job_arrays]
    if projects or job_arrays or dry_run:
        plan = None
    results += _apply_jobs(state, jobs, dry_run, plan)
    items = []
    for r in results:
        item: dict[str, Any] = {"kind": r.kind, "name": r.name, "action": r.action}
        if objects:
            item["object"] = doc(r.obj)
        items.append(item)
    return encode_json({"results": items})


def _apply_jobs(
    state: BrokerState, jobs: list[Job], dry_run: bool, plan: NewRoom | None
) -> list[admission.ApplyResult]:
    """admission.apply_jobs, and what of its new jobs the room takes bound, in one commit."""
    ctx = state.ctx
    with one_commit(ctx, plan):
        results = admission.apply_jobs(state.store, jobs, ctx.clock, dry_run)
        created = [r for r in results if r.action == "created"]
        placed = place_new(ctx, plan, [cast(Job, r.obj) for r in created])
    for result, job in zip(created, placed, strict=True):
        result.obj = job
    return results


def _may_apply(who: Principal, projects: list[Project], jobs: list[Job | JobArray]) -> None:
    """Nothing of an apply is written unless its principal may write all of it."""
    if who.admin:
        return
    if projects:
        raise Forbidden(f"token {who.label!r} may not write projects (project/{projects[0].name})")
    for project in sorted({job.project for job in jobs}):
        access.project(who, project)


def _may_change_live(state: BrokerState, who: Principal, jobs: list[Job]) -> None:
    """A person's apply over a stored job changes it: theirs only, unless a project admin."""
    if not who.person:
        return
    for job in jobs:
        name = job.metadata.name
        live = state.store.get_job_by_name(job.project, name) if name else None
        if live is not None:
            access.change(who, live)


@contextmanager
def _collector_paused() -> Iterator[None]:
    """No cyclic garbage collection while an apply runs.

    An apply's documents, rows and results live until it answers, so every young
    collection on the way walked all of them again (7 % of the broker's time under a
    stream of applies). They make no reference cycles and die by reference counting when
    `_apply` returns, before collection resumes: then nobody walks them at all. Inline
    (SQLite) no other request runs while the collector rests; off the loop (PostgreSQL)
    others do, and their garbage waits for the apply's end too.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


async def create_job(state: BrokerState, _path: PathArgs, job: Job, who: Principal) -> str:
    if not who.admin:
        access.project(who, job.project)
    access.stamp_owner(who, job)
    _refuse_root(state, [job])
    created = await state.creates.create(job)
    return state.feed.document(created) or doc(created)  # the commit's text, if the feed has it


def _refuse_root(state: BrokerState, made: Sequence[Job | JobArray], *given: Project) -> None:
    """A job of root only in a project that allows it (admission.refuse_root_owner);
    `given`: projects of the same apply, which count before the stored ones."""
    batch = {p.name: p for p in given}
    for resource in made:
        project = batch.get(resource.project) or state.ctx.view.projects.get(resource.project)
        admission.refuse_root_owner(resource, project, state.config.trusted_owner)


CREATE_JOB = FastRoute(routes.CREATE_JOB, create_job)
declare(router, CREATE_JOB)


@route(router, routes.LIST_JOBS)
async def list_jobs(request: Request, query: Annotated[JobsQuery, Query()]) -> Response:
    state, who = state_of(request), principal_of(request)
    reveal = access.reveals(who, query.worker)  # every job listed is bound to that worker
    revision = state.feed.revision
    items = find_jobs(state, who, query)
    return json_response({"items": [doc(j, reveal=reveal) for j in items], "revision": revision})


def find_jobs(state: BrokerState, who: Principal, query: JobsQuery) -> list[Job]:
    """The jobs a listing asks for, within what `who` may see (the API's and the dashboard's
    one query); Forbidden when it asks outside that."""
    access.jobs_visible(who, query.project, query.worker)
    selector = parse_selector(query.selector) if query.selector is not None else None
    items = state.store.list_jobs(
        project=query.project,
        projects=access.projects(who) if who.role == "user" else None,
        phases=query.phase,
        worker=query.worker,
        name=query.name,
        limit=query.limit if selector is None else None,  # the limit counts matching jobs
    )
    if selector is not None:
        items = [j for j in items if selector.matches(j.metadata.labels)][: query.limit]
    return items


@route(router, routes.GET_JOB)
async def get_job(request: Request, job_id: int) -> Response:
    return json_response(doc(_job(request, job_id)))


def _job(request: Request, job_id: int) -> Job:
    """The job, if the request's principal may read it (403 naming why)."""
    return access.job(principal_of(request), job_or_404(state_of(request), job_id))


def _changed(request: Request, job_id: int) -> Job:
    """The job, if the request's principal may change it: a person's own, or as an admin
    of its project (403 naming why, before anything is changed)."""
    job = job_or_404(state_of(request), job_id)
    access.change(principal_of(request), job)
    return job


@route(router, routes.DELETE_JOB)
async def delete_job(request: Request, job_id: int) -> Response:
    state = state_of(request)
    job = _changed(request, job_id)
    if not job.status.phase.terminal:
        raise TransitionError(
            f"job {job_id} is {job.status.phase}; cancel it first, then delete it"
        )
    state.store.delete_job(job)
    state.logs.remove(job_id)
    return json_response({"deleted": job_id})


@route(router, routes.CANCEL_JOB)
async def cancel_job(request: Request, job_id: int) -> Response:
    state = state_of(request)
    return json_response(doc(cancel(state.ctx, _changed(request, job_id))))


@route(router, routes.PREEMPT_JOB)
async def preempt_job(request: Request, job_id: int) -> Response:
    state = state_of(request)
    job = _changed(request, job_id)
    return json_response(doc(preempt.request_preemption(state.ctx, job, "manual")))


@route(router, routes.PREEMPT_BLOCKERS)
async def preempt_blockers(
    request: Request, job_id: int, query: Annotated[BlockersQuery, Query()]
) -> Response:
    state, who = state_of(request), principal_of(request)
    dry_run = query.dry_run
    candidate = _job(request, job_id)
    if not who.admin:  # a user preempts only the jobs it may change, for its own
        for victim in preempt.preempt_blockers(state.ctx, candidate, dry_run=True).victims:
            access.change(who, victim)
    plan = preempt.preempt_blockers(state.ctx, candidate, dry_run)
    answer = {
        "candidate": job_id,
        "worker": plan.worker,
        "victims": [doc(v) for v in plan.victims],
        "dry_run": dry_run,
    }
    if plan.gang:  # a job of several nodes: every worker freed for it, rank 0's first
        answer["workers"] = plan.gang
    return json_response(answer)


@route(router, routes.EXPLAIN_JOB)
async def explain_job(request: Request, job_id: int) -> Response:
    state, who = state_of(request), principal_of(request)
    job = _job(request, job_id)
    queue = await state.ctx.runner.run(_queue_of, state.store, job)  # off the loop
    view = state.ctx.view  # read on the loop, where the view is kept
    cluster = Cluster(
        list(view.workers.values()),
        state.ctx.leases.heard,
        list(view.bound.values()),
        list(view.nominated.values()),
    )
    if job.metadata.array is not None:
        queue.array_bound = view.array_bound.get(job.metadata.array.id, 0)
    queue.now = state.ctx.clock.now()
    answer = explain(job, cluster, queue)
    for victim in (answer.get("preemption") or {}).get("victims", []):
        if not _may_read(who, victim["name"]):
            victim["name"] = None  # another project's job: its id and priority only
    return json_response(answer)


def _queue_of(store: Store, job: Job) -> Queue:
    """What `job explain` reads of the store: the queue ahead of the job, its parents."""
    queue, status = Queue(), job.status
    if status.phase != Phase.PENDING:
        return queue
    if status.ready:
        queue.ahead, queue.ahead_higher = store.count_queued_ahead(
            status.effective.priority, job.id
        )
    found = {p.id: p for p in store.get_jobs(status.parents)}
    queue.parents = [(i, found.get(i)) for i in status.parents]
    return queue


def _may_read(who: Principal, ref: str) -> bool:
    """Whether `who` may read a job of this `project/name` (as reading the job)."""
    try:
        access.project(who, ref.partition("/")[0])
    except Forbidden:
        return False
    return True


@route(router, routes.RESUME_JOB)
async def resume(request: Request, job_id: int, query: Annotated[ResumeQuery, Query()]) -> Response:
    state = state_of(request)
    options = {"from_scratch": query.from_scratch, "force": query.force}
    resumed = resume_job(state.ctx, _changed(request, job_id), **options)
    return json_response(doc(resumed), status_code=201)


@route(
    router,
    routes.READ_LOGS,
    responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}}},
)
async def read_logs(
    request: Request, job_id: int, query: Annotated[LogsQuery, Query()]
) -> Response:
    state = state_of(request)
    follow, timeout = query.follow, query.timeout
    job = _job(request, job_id)
    now = state.ctx.clock.now()
    rank = _rank_read(job, query.rank)
    offset = state.logs.start(job_id, query.offset, query.tail, query.since_s, now, rank)
    found = state.logs.read(job_id, offset, rank=rank)
    if follow and not found.data and not job.status.phase.terminal:
        await state.logs.notifier(job_id).wait(timeout)
        found = state.logs.read(job_id, offset, rank=rank)
        job = job_or_404(state, job_id)
    done = job.status.phase.terminal and found.next_offset >= found.end
    headers = {"X-Jobd-Offset": str(found.next_offset), "X-Jobd-Done": str(done).lower()}
    return Response(found.data, media_type="text/plain; charset=utf-8", headers=headers)


def _rank_read(job: Job, rank: int | None) -> int | None:
    """Whose output a read of the job's logs asked for: one member of a multi-host job,
    else (None) the job's own log, which a job of one node's rank 0 reads too."""
    if rank is not None and rank >= job.spec.nodes:
        nodes = job.spec.nodes
        ranks = "rank 0" if nodes == 1 else f"ranks 0 to {nodes - 1}"
        # As a job that is not there: a member that is not there is not found (404).
        raise NotFound(f"rank: job {job.id} runs on {nodes} node(s): {ranks}, not {rank}")
    return rank if job.spec.nodes > 1 else None


__all__ = ["FAST", "find_jobs", "router"]

FAST = (CREATE_JOB,)
