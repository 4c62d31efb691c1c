"""User-facing job routes: create, apply, list, get, delete, and the verbs on a job."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from jobd.api.manifests import Document, parse_resource
from jobd.api.models import ADMISSION, Job, Phase, Project, Resource
from jobd.broker.responses import doc, encode_json, json_response
from jobd.broker.state import BrokerState, job_or_404, state_of
from jobd.controllers.errors import AdmissionError, TransitionError
from jobd.controllers.verbs import admission, preempt
from jobd.controllers.verbs.cancel import cancel
from jobd.controllers.verbs.resume import resume_job

router = APIRouter(tags=["jobs"])
_M = TypeVar("_M", bound=BaseModel)


class ApplyRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    documents: list[dict[str, Any]] = Field(min_length=1)
    dry_run: bool = False


class _ApplyJobs(BaseModel):
    """An apply of Jobs only, the common case: validated in one pass of pydantic's core."""

    model_config = ConfigDict(extra="forbid")
    documents: list[Job] = Field(min_length=1)
    dry_run: bool = False


def _apply_body(raw: bytes) -> tuple[list[Resource], bool]:
    """The documents of an apply and its dry_run flag.

    Jobs that each say `kind: Job` take the one-pass path; anything else (projects, a
    missing kind, an invalid document) is parsed a document at a time, which names the
    document and field of the first error.
    """
    try:
        jobs = _ApplyJobs.model_validate_json(raw, context=ADMISSION)
    except ValidationError:
        pass
    else:
        if all("kind" in job.model_fields_set for job in jobs.documents):
            return list(jobs.documents), jobs.dry_run
    try:
        body = ApplyRequest.model_validate_json(raw)
    except ValidationError as exc:
        raise RequestValidationError(exc.errors()) from None
    resources = [
        parse_resource(Document(doc, f"document {i + 1}", 1))
        for i, doc in enumerate(body.documents)
    ]
    return resources, body.dry_run


def _json_body(model: type[BaseModel]) -> dict[str, Any]:
    """OpenAPI for a body the route parses itself (pydantic's JSON parser, in Rust)."""
    schema = {"schema": model.model_json_schema(by_alias=True)}
    return {"requestBody": {"content": {"application/json": schema}, "required": True}}


async def _parse(request: Request, model: type[_M]) -> _M:
    try:
        return model.model_validate_json(await request.body(), context=ADMISSION)
    except ValidationError as exc:
        raise RequestValidationError(exc.errors()) from None


@router.post(
    "/apply",
    summary="Create or update each document (server-side apply)",
    openapi_extra=_json_body(ApplyRequest),
)
async def apply(
    request: Request,
    objects: Annotated[
        bool, Query(description="Each result carries the object; false: kind, name, action")
    ] = True,
) -> Response:
    body = await request.body()
    with _collector_paused():
        text = _apply(state_of(request), body, objects)
    return Response(text, media_type="application/json")


def _apply(state: BrokerState, raw: bytes, objects: bool) -> str:
    """The apply's answer, as JSON text. Everything else it made is gone when it returns."""
    resources, dry_run = _apply_body(raw)
    projects = [r for r in resources if isinstance(r, Project)]
    jobs = [r for r in resources if isinstance(r, Job)]
    if len(jobs) + len(projects) != len(resources):
        raise AdmissionError("kind: Worker documents are written by workers only")
    if projects:  # refuse before writing anything: a bad job must not leave its projects
        admission.apply_jobs(state.store, jobs, state.ctx.clock, dry_run=True)
    results = [admission.apply_project(state.store, p, dry_run) for p in projects]
    results += admission.apply_jobs(state.store, jobs, state.ctx.clock, dry_run)
    items = []
    for r in results:
        item: dict[str, Any] = {"kind": r.kind, "name": r.name, "action": r.action}
        if objects:
            item["object"] = doc(r.obj)
        items.append(item)
    return encode_json({"results": items})


@contextmanager
def _collector_paused() -> Iterator[None]:
    """No cyclic garbage collection while an apply runs.

    An apply's documents, rows and results live until it answers, so every young
    collection on the way walked all of them again (7 % of the broker's time under a
    stream of applies). They make no reference cycles and die by reference counting when
    `_apply` returns, before collection resumes: then nobody walks them at all. No await
    inside, so no other request runs while the collector rests.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@router.post(
    "/jobs",
    status_code=201,
    summary="Create one job (imperative submit)",
    openapi_extra=_json_body(Job),
)
async def create_job(request: Request) -> Response:
    job = await _parse(request, Job)
    return json_response(doc(await state_of(request).creates.create(job)), status_code=201)


@router.get("/jobs", summary="List jobs, filtered")
async def list_jobs(
    request: Request,
    project: str | None = None,
    phase: Annotated[list[Phase] | None, Query()] = None,
    worker: str | None = None,
    name: str | None = None,
    limit: Annotated[int | None, Query(ge=1)] = None,
) -> Response:
    state = state_of(request)
    revision = state.feed.revision
    items = state.store.list_jobs(
        project=project, phases=phase, worker=worker, name=name, limit=limit
    )
    return json_response({"items": [doc(j) for j in items], "revision": revision})


@router.get("/jobs/{job_id}", summary="One job")
async def get_job(request: Request, job_id: int) -> Response:
    return json_response(doc(job_or_404(state_of(request), job_id)))


@router.delete("/jobs/{job_id}", summary="Remove a finished job")
async def delete_job(request: Request, job_id: int) -> Response:
    state = state_of(request)
    job = job_or_404(state, job_id)
    if not job.status.phase.terminal:
        raise TransitionError(
            f"job {job_id} is {job.status.phase}; cancel it first, then delete it"
        )
    state.store.delete_job(job)
    state.logs.remove(job_id)
    return json_response({"deleted": job_id})


@router.post("/jobs/{job_id}/cancel", summary="Stop a job: desired phase Cancelled")
async def cancel_job(request: Request, job_id: int) -> Response:
    state = state_of(request)
    return json_response(doc(cancel(state.ctx, job_or_404(state, job_id))))


@router.post("/jobs/{job_id}/preempt", summary="Preempt this running job (job preempt)")
async def preempt_job(request: Request, job_id: int) -> Response:
    state = state_of(request)
    job = job_or_404(state, job_id)
    return json_response(doc(preempt.request_preemption(state.ctx, job, "manual")))


@router.post("/jobs/{job_id}/preempt-blockers", summary="Preempt what keeps a queued job out")
async def preempt_blockers(request: Request, job_id: int, dry_run: bool = False) -> Response:
    state = state_of(request)
    plan = preempt.preempt_blockers(state.ctx, job_or_404(state, job_id), dry_run)
    return json_response(
        {
            "candidate": job_id,
            "worker": plan.worker,
            "victims": [doc(v) for v in plan.victims],
            "dry_run": dry_run,
        }
    )


@router.post("/jobs/{job_id}/resume", status_code=201, summary="Resubmit from its checkpoint")
async def resume(request: Request, job_id: int) -> Response:
    state = state_of(request)
    return json_response(doc(resume_job(state.ctx, job_or_404(state, job_id))), status_code=201)


@router.get("/jobs/{job_id}/logs", summary="The job's output from a byte offset")
async def read_logs(
    request: Request,
    job_id: int,
    offset: Annotated[int, Query(ge=0)] = 0,
    follow: bool = False,
    timeout: Annotated[float, Query(ge=0, le=300)] = 30.0,
) -> Response:
    state = state_of(request)
    data = state.logs.read(job_id, offset)
    job = job_or_404(state, job_id)
    if follow and not data and not job.status.phase.terminal:
        await state.logs.notifier(job_id).wait(timeout)
        data = state.logs.read(job_id, offset)
        job = job_or_404(state, job_id)
    done = job.status.phase.terminal and not state.logs.read(job_id, offset + len(data), 1)
    headers = {"X-Jobd-Offset": str(offset + len(data)), "X-Jobd-Done": str(done).lower()}
    return Response(data, media_type="text/plain; charset=utf-8", headers=headers)


__all__ = ["router"]
