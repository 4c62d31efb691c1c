"""Worker-facing routes: registration, lease, the reports of the seed, logs and events."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response

from jobd.api.models import Job
from jobd.broker.fastpath import FastRoute, PathArgs, declare
from jobd.broker.responses import doc, encode_json, json_response, status_for
from jobd.broker.routing import route
from jobd.broker.state import BrokerState, reported_job_or_404, state_of
from jobd.controllers import workers
from jobd.controllers.errors import TransitionError
from jobd.controllers.verbs import reports, worker_lease
from jobd.store.base import Conflict, EventRecord, NotFound
from jobd.wire import routes
from jobd.wire.models import (
    REPORT_BODIES,
    Completion,
    Heartbeat,
    LogsAppendQuery,
    Registration,
    Report,
    ReportBatch,
    Started,
    WorkerEvent,
    WorkerEvents,
)

router = APIRouter(tags=["workers"])


@route(router, routes.REGISTER_WORKER)
async def register(request: Request, name: str, body: Registration) -> Response:
    state = state_of(request)
    worker = worker_lease.register_worker(state.ctx, name, body.spec, body.hostname, body.runner)
    return json_response({"worker": doc(worker), "revision": state.feed.revision})


async def heartbeat(state: BrokerState, path: PathArgs, body: Heartbeat) -> str:
    return encode_json(run_heartbeat(state, path["name"], body))


def run_heartbeat(state: BrokerState, name: str, body: Heartbeat) -> dict[str, Any]:
    worker, stop = worker_lease.heartbeat(state.ctx, name, body.running)
    return {"worker": doc(worker), "stop": stop}


HEARTBEAT = FastRoute(routes.HEARTBEAT, heartbeat)
declare(router, HEARTBEAT)


@route(router, routes.LIST_WORKERS)
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
    failure = None if body.reason is None else (body.reason, body.message or "")
    return reports.report_complete(
        state.ctx, job, body.worker, body.exit_code, body.signal, failure
    )


def _checkpoint_complete(state: BrokerState, job: Job, body: Report) -> Job:
    return reports.record_checkpoint_complete(state.ctx, job, body.worker)


@route(router, routes.REPORTS["started"])
async def started(request: Request, job_id: int, body: Started) -> Response:
    state = state_of(request)
    return json_response(doc(_started(state, reported_job_or_404(state, job_id), body)))


@route(router, routes.REPORTS["stopping"])
async def stopping(request: Request, job_id: int, body: Report) -> Response:
    state = state_of(request)
    return json_response(doc(_stopping(state, reported_job_or_404(state, job_id), body)))


@route(router, routes.REPORTS["complete"])
async def complete(request: Request, job_id: int, body: Completion) -> Response:
    state = state_of(request)
    return json_response(doc(_complete(state, reported_job_or_404(state, job_id), body)))


@route(router, routes.REPORTS["checkpoint-complete"])
async def checkpoint_complete(request: Request, job_id: int, body: Report) -> Response:
    state = state_of(request)
    job = reported_job_or_404(state, job_id)
    return json_response(doc(_checkpoint_complete(state, job, body)))


# What each report does; its body is models.REPORT_BODIES[verb].
_REPORTS: dict[str, Callable[[BrokerState, Job, Any], Job]] = {
    "started": _started,
    "stopping": _stopping,
    "complete": _complete,
    "checkpoint-complete": _checkpoint_complete,
}
# What refuses one report of a batch and not the others; answered with the status every
# route gives it (ERROR_STATUSES). Anything else fails the whole request.
_REFUSED: tuple[type[Exception], ...] = (NotFound, Conflict, TransitionError)


async def report_batch(state: BrokerState, path: PathArgs, body: ReportBatch) -> str:
    """Runs each report in order as its own route would; one refused does not stop the rest.

    A busy worker sends what piled up while its previous request was in flight: a
    job's `started` and `complete` reports often travel together, with its events. All
    of a batch is written in one transaction, with one commit.
    """
    return encode_json(run_report_batch(state, path["name"], body))


REPORT_BATCH = FastRoute(routes.REPORT_BATCH, report_batch, inspect.getdoc(report_batch))
declare(router, REPORT_BATCH)


def run_report_batch(state: BrokerState, name: str, body: ReportBatch) -> dict[str, Any]:
    results: list[dict[str, Any]] = []
    written: dict[int, Job] = {}  # what this batch wrote, not yet committed nor in the view
    with state.store.batch():
        for item in body.reports:
            handler, model = _REPORTS[item.verb], REPORT_BODIES[item.verb]
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


@route(router, routes.APPEND_LOGS)
async def append_logs(
    request: Request, job_id: int, query: Annotated[LogsAppendQuery, Query()]
) -> Response:
    state = state_of(request)
    data = await request.body()
    return json_response({"offset": state.logs.append(job_id, query.offset, data)})


@route(router, routes.INGEST_EVENTS)
async def ingest_events(request: Request, body: WorkerEvents) -> Response:
    state = state_of(request)
    records = _records(body.worker, body.events)
    state.store.append_events(records)
    return json_response({"accepted": len(records)})


__all__ = ["FAST", "router"]

FAST = (HEARTBEAT, REPORT_BATCH)
