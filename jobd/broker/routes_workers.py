"""Worker-facing routes: registration, lease, the reports of the seed, logs and events."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from jobd.api.models import WorkerSpec
from jobd.broker.responses import doc, json_response
from jobd.broker.state import job_or_404, state_of
from jobd.controllers import lifecycle, workers
from jobd.controllers.checkpoints import record_checkpoint_complete
from jobd.store.base import EventRecord

router = APIRouter(tags=["workers"])


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Registration(_Body):
    spec: WorkerSpec
    hostname: str = ""
    runner: str = ""


class Heartbeat(_Body):
    running: list[int] = Field(default_factory=list)


class Report(_Body):
    worker: str


class Started(Report):
    checkpoint_dir: str | None = None


class Completion(Report):
    exit_code: int | None = None
    signal: int | None = None
    checkpoint_latest: str | None = None


class WorkerEvent(_Body):
    event: str = Field(min_length=1, max_length=64)
    job: int | None = None
    ts: str = Field(default="", max_length=40, description="when the worker saw it (RFC 3339)")
    fields: dict[str, Any] = Field(default_factory=dict)


class WorkerEvents(_Body):
    worker: str
    events: list[WorkerEvent]


@router.put("/workers/{name}", summary="Register (or re-register) a worker")
async def register(request: Request, name: str, body: Registration) -> Response:
    state = state_of(request)
    worker = workers.register_worker(
        state.store, name, body.spec, body.hostname, body.runner, state.ctx
    )
    return json_response({"worker": doc(worker), "revision": state.feed.revision})


@router.post("/workers/{name}/heartbeat", summary="Renew the lease; reconcile jobs both ways")
async def heartbeat(request: Request, name: str, body: Heartbeat) -> Response:
    state = state_of(request)
    worker, stop = workers.heartbeat(state.store, name, body.running, state.ctx)
    return json_response({"worker": doc(worker), "stop": stop})


@router.get("/workers", summary="List workers")
async def list_workers(request: Request) -> Response:
    state = state_of(request)
    items = []
    for worker in state.store.list_workers():
        worker.status.last_renewal = workers.last_renewal(state.ctx, worker)
        items.append(doc(worker))
    return json_response({"items": items})


@router.post("/jobs/{job_id}/started", summary="Worker: the workload process started")
async def started(request: Request, job_id: int, body: Started) -> Response:
    state = state_of(request)
    job = job_or_404(state, job_id)
    if body.checkpoint_dir and job.status.checkpoint_dir != body.checkpoint_dir:
        job = job.evolve()
        job.status.checkpoint_dir = body.checkpoint_dir
    return json_response(doc(lifecycle.report_started(state.store, job, body.worker, state.ctx)))


@router.post("/jobs/{job_id}/stopping", summary="Worker: SIGTERM sent, grace running")
async def stopping(request: Request, job_id: int, body: Report) -> Response:
    state = state_of(request)
    return json_response(
        doc(
            lifecycle.report_stopping(
                state.store, job_or_404(state, job_id), body.worker, state.ctx
            )
        )
    )


@router.post("/jobs/{job_id}/complete", summary="Worker: the workload exited")
async def complete(request: Request, job_id: int, body: Completion) -> Response:
    state = state_of(request)
    job = job_or_404(state, job_id)
    if body.checkpoint_latest and not job.status.phase.terminal:
        job = job.evolve()
        job.status.checkpoint_latest = body.checkpoint_latest
    job = lifecycle.report_complete(
        state.store, job, body.worker, body.exit_code, body.signal, state.ctx
    )
    return json_response(doc(job))


@router.post(
    "/jobs/{job_id}/checkpoint-complete",
    summary="Worker: the sentinel was seen during the grace window",
)
async def checkpoint_complete(request: Request, job_id: int, body: Report) -> Response:
    state = state_of(request)
    job = record_checkpoint_complete(state.store, job_or_404(state, job_id), body.worker)
    return json_response(doc(job))


@router.post("/jobs/{job_id}/logs", summary="Worker: append output at a byte offset")
async def append_logs(
    request: Request, job_id: int, offset: Annotated[int, Query(ge=0)] = 0
) -> Response:
    state = state_of(request)
    data = await request.body()
    return json_response({"offset": state.logs.append(job_id, offset, data)})


@router.post("/events", summary="Worker: ingest structured events into the record")
async def ingest_events(request: Request, body: WorkerEvents) -> Response:
    state = state_of(request)
    records = [
        EventRecord(e.event, job=e.job, worker=body.worker, fields=e.fields, ts=e.ts)
        for e in body.events
    ]
    state.store.append_events(records)
    return json_response({"accepted": len(records)})


__all__ = ["router"]
