"""Worker-facing routes: registration, lease, the reports of the seed, logs and events."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from jobd.api.models import Job, WorkerSpec
from jobd.broker.responses import doc, json_response, status_for
from jobd.broker.state import BrokerState, reported_job_or_404, state_of
from jobd.controllers import workers
from jobd.controllers.errors import TransitionError
from jobd.controllers.verbs import reports, worker_lease
from jobd.store.base import Conflict, EventRecord, NotFound

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
    worker = worker_lease.register_worker(state.ctx, name, body.spec, body.hostname, body.runner)
    return json_response({"worker": doc(worker), "revision": state.feed.revision})


@router.post("/workers/{name}/heartbeat", summary="Renew the lease; reconcile jobs both ways")
async def heartbeat(request: Request, name: str, body: Heartbeat) -> Response:
    return json_response(run_heartbeat(state_of(request), name, body))


def run_heartbeat(state: BrokerState, name: str, body: Heartbeat) -> dict[str, Any]:
    """(Served by FastRoutes, see fastpath.py; the route above documents it.)"""
    worker, stop = worker_lease.heartbeat(state.ctx, name, body.running)
    return {"worker": doc(worker), "stop": stop}


@router.get("/workers", summary="List workers")
async def list_workers(request: Request) -> Response:
    state = state_of(request)
    items = []
    for worker in state.store.list_workers():
        worker.status.last_renewal = workers.last_renewal(state.ctx, worker)
        items.append(doc(worker))
    return json_response({"items": items})


def _started(state: BrokerState, job: Job, body: Started) -> Job:
    if body.checkpoint_dir and job.status.checkpoint_dir != body.checkpoint_dir:
        job = job.evolve()
        job.status.checkpoint_dir = body.checkpoint_dir
    return reports.report_started(state.ctx, job, body.worker)


def _stopping(state: BrokerState, job: Job, body: Report) -> Job:
    return reports.report_stopping(state.ctx, job, body.worker)


def _complete(state: BrokerState, job: Job, body: Completion) -> Job:
    if body.checkpoint_latest and not job.status.phase.terminal:
        job = job.evolve()
        job.status.checkpoint_latest = body.checkpoint_latest
    return reports.report_complete(state.ctx, job, body.worker, body.exit_code, body.signal)


def _checkpoint_complete(state: BrokerState, job: Job, body: Report) -> Job:
    return reports.record_checkpoint_complete(state.ctx, job, body.worker)


@router.post("/jobs/{job_id}/started", summary="Worker: the workload process started")
async def started(request: Request, job_id: int, body: Started) -> Response:
    state = state_of(request)
    return json_response(doc(_started(state, reported_job_or_404(state, job_id), body)))


@router.post("/jobs/{job_id}/stopping", summary="Worker: SIGTERM sent, grace running")
async def stopping(request: Request, job_id: int, body: Report) -> Response:
    state = state_of(request)
    return json_response(doc(_stopping(state, reported_job_or_404(state, job_id), body)))


@router.post("/jobs/{job_id}/complete", summary="Worker: the workload exited")
async def complete(request: Request, job_id: int, body: Completion) -> Response:
    state = state_of(request)
    return json_response(doc(_complete(state, reported_job_or_404(state, job_id), body)))


@router.post(
    "/jobs/{job_id}/checkpoint-complete",
    summary="Worker: the sentinel was seen during the grace window",
)
async def checkpoint_complete(request: Request, job_id: int, body: Report) -> Response:
    state = state_of(request)
    job = reported_job_or_404(state, job_id)
    return json_response(doc(_checkpoint_complete(state, job, body)))


class BatchedReport(_Body):
    """One of the reports above, for the batch route: the verb names which."""

    job: int
    verb: Literal["started", "stopping", "complete", "checkpoint-complete"]
    checkpoint_dir: str | None = None
    exit_code: int | None = None
    signal: int | None = None
    checkpoint_latest: str | None = None


class ReportBatch(_Body):
    reports: list[BatchedReport] = Field(default_factory=list)
    events: list[WorkerEvent] = Field(default_factory=list)


_REPORTS: dict[str, tuple[Callable[[BrokerState, Job, Any], Job], type[Report]]] = {
    "started": (_started, Started),
    "stopping": (_stopping, Report),
    "complete": (_complete, Completion),
    "checkpoint-complete": (_checkpoint_complete, Report),
}
# What refuses one report of a batch and not the others; answered with the status every
# route gives it (ERROR_STATUSES). Anything else fails the whole request.
_REFUSED: tuple[type[Exception], ...] = (NotFound, Conflict, TransitionError)


@router.post(
    "/workers/{name}/reports",
    summary="Worker: several reports and events in one request, each answered on its own",
)
async def report_batch(request: Request, name: str, body: ReportBatch) -> Response:
    """Runs each report in order as its own route would; one refused does not stop the rest.

    A busy worker sends what piled up while its previous request was in flight: a
    job's `started` and `complete` reports often travel together, with its events. All
    of a batch is written in one transaction, with one commit. (Served by FastRoutes,
    see fastpath.py; declared here for the OpenAPI document.)
    """
    return json_response(run_report_batch(state_of(request), name, body))


def run_report_batch(state: BrokerState, name: str, body: ReportBatch) -> dict[str, Any]:
    results: list[dict[str, Any]] = []
    written: dict[int, Job] = {}  # what this batch wrote, not yet committed nor in the view
    with state.store.batch():
        for item in body.reports:
            handler, model = _REPORTS[item.verb]
            fields = item.model_dump(exclude={"job", "verb"}, exclude_none=True)
            report = model.model_validate({"worker": name, **fields}, strict=False)
            try:
                job = written.get(item.job) or reported_job_or_404(state, item.job)
                written[item.job] = job = handler(state, job, report)
            except _REFUSED as exc:
                status = status_for(exc)
                results.append({"job": item.job, "status": status, "detail": str(exc)})
            else:
                results.append({"job": item.job, "status": 200, "phase": str(job.status.phase)})
        if body.events:
            state.store.append_events(_records(name, body.events))
    return {"results": results, "events": len(body.events)}


def _records(worker: str, events: list[WorkerEvent]) -> list[EventRecord]:
    return [
        EventRecord(e.event, job=e.job, worker=worker, fields=e.fields, ts=e.ts) for e in events
    ]


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
    records = _records(body.worker, body.events)
    state.store.append_events(records)
    return json_response({"accepted": len(records)})


__all__ = ["router"]
