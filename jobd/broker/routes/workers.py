"""Worker-facing routes: registration, lease, the reports of the seed, logs and events.

A batch of reports and a batch of events each name their `delivery` (the agent's run and
the request's number), claimed as the worker's receipt in the transaction that applies
it: a request that comes again after an unknown outcome (a broker killed after its
commit, before answering; the agent then sends it to the next broker) is acknowledged
without being applied twice, each report with where its job stands now.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response

from jobd.api.models import Job, Worker
from jobd.broker.auth import access
from jobd.broker.auth.access import principal_of
from jobd.broker.auth.tokens import Principal
from jobd.broker.http.fastpath import FastRoute, PathArgs, declare
from jobd.broker.http.responses import RawJSON, doc, encode_json, json_response, status_for
from jobd.broker.http.routing import route
from jobd.broker.state import BrokerState, reported_job_or_404, state_of
from jobd.controllers import transitions, workers
from jobd.controllers.errors import TransitionError
from jobd.controllers.gangs import runs_on
from jobd.controllers.verbs import drain, lease_holder, refill, reports, worker_lease
from jobd.store.base import Conflict, EventRecord, NotFound
from jobd.wire import routes
from jobd.wire.models import (
    REPORT_BODIES,
    Completion,
    Delivery,
    DrainQuery,
    Heartbeat,
    LogsAppendQuery,
    ProgressReport,
    Registration,
    Report,
    ReportBatch,
    Started,
    WorkerEvent,
    WorkerEvents,
)

router = APIRouter(tags=["workers"])


async def register(state: BrokerState, path: PathArgs, body: Registration, who: Principal) -> str:
    """Create or refresh the worker; Ready, with a fresh lease.

    The name is the path's, checked as every route's is: lower case (a worker agent
    normalises its hostname so). The body is parsed under admission's rules, as every
    request body is: negative or repeated GPU indices are a 422.
    """
    access.as_worker(who, path["name"])
    ctx = state.ctx
    worker = worker_lease.register_worker(
        ctx,
        path["name"],
        body.spec,
        body.hostname,
        body.runner,
        body.instance,
        owners=(body.runs_as, body.users),
        address=body.address,
    )
    return encode_json({"worker": doc(worker), "revision": state.feed.revision})


# Answered through fastpath.answer, not for speed: so its body is parsed as admission's.
REGISTER = FastRoute(routes.REGISTER_WORKER, register, inspect.getdoc(register))
declare(router, REGISTER)


async def heartbeat(state: BrokerState, path: PathArgs, body: Heartbeat, who: Principal) -> str:
    """Renewed in memory on the loop; what it must read or write, on the store's thread
    off the loop (store/runner.py). Most heartbeats need neither and never leave the loop."""
    access.as_worker(who, path["name"])
    ctx = state.ctx
    renewal = worker_lease.renew(
        ctx,
        path["name"],
        body.running,
        body.attempts,
        body.gpu_memory_foreign,
        body.disk_full,
        (body.instance, body.epoch),
        body.users,
    )
    if ctx.runner.off_loop and renewal.needs_store:
        worker, stop = await ctx.runner.run(worker_lease.settle, ctx, renewal)
    else:
        worker, stop = worker_lease.settle(ctx, renewal)
    state.gpu_readings.record(path["name"], body.gpu_usage)  # after the lease check: the holder's
    return encode_json({"worker": doc(worker), "stop": stop})


HEARTBEAT = FastRoute(routes.HEARTBEAT, heartbeat)
declare(router, HEARTBEAT)


@route(router, routes.LIST_WORKERS)
async def list_workers(request: Request) -> Response:
    state = state_of(request)
    items = [_worker_doc(state, w, copy=False) for w in state.store.list_workers()]
    return json_response({"items": items})


def _worker_doc(state: BrokerState, worker: Worker, *, copy: bool = True) -> RawJSON:
    """The worker with what the broker keeps in memory: its lease, its GPUs' use."""
    worker = worker.model_copy(deep=True) if copy else worker
    worker.status.last_renewal = workers.last_renewal(state.ctx, worker)
    worker.status.gpu_usage = state.gpu_readings.of(worker)
    return doc(worker)


@route(router, routes.GET_WORKER)
async def get_worker(request: Request, name: str) -> Response:
    state = state_of(request)
    if principal_of(request).role == "worker":
        access.as_worker(principal_of(request), name)
    return json_response(_worker_doc(state, drain.worker_or_404(state.ctx, name)))


@route(router, routes.CORDON_WORKER)
async def cordon(request: Request, name: str) -> Response:
    state = state_of(request)
    return json_response(_worker_doc(state, drain.cordon(state.ctx, name, True)))


@route(router, routes.UNCORDON_WORKER)
async def uncordon(request: Request, name: str) -> Response:
    state = state_of(request)
    return json_response(_worker_doc(state, drain.cordon(state.ctx, name, False)))


@route(router, routes.DRAIN_WORKER)
async def drain_worker(
    request: Request, name: str, query: Annotated[DrainQuery, Query()]
) -> Response:
    """Cordon the worker and, with `preempt`, preempt its preemptible Running jobs.

    Answers the worker, the ids preempted by this request, and the jobs still bound to
    the worker; asked again, it preempts only what started since. `job drain` asks
    until no job is left.
    """
    state = state_of(request)
    result = drain.drain(state.ctx, name, query.preempt)
    return json_response(
        {
            "worker": _worker_doc(state, result.worker),
            "preempted": [j.id for j in result.preempted],
            "remaining": [doc(j) for j in result.remaining],
        }
    )


def _started(state: BrokerState, job: Job, body: Started) -> Job:
    if job.status.members:  # each member's cores and directory are its own
        said = (body.master_port, body.checkpoint_dir)
        return reports.report_started(state.ctx, job, body.worker, body.attempt, body.rank, said)
    job, _ = transitions.record_checkpoint_dir(job, body.checkpoint_dir)
    job, _ = transitions.record_cpuset(job, body.cpuset)
    return reports.report_started(state.ctx, job, body.worker, body.attempt, body.rank)


def _stopping(state: BrokerState, job: Job, body: Report) -> Job:
    return reports.report_stopping(state.ctx, job, body.worker, body.attempt, body.rank)


def _complete(state: BrokerState, job: Job, body: Completion) -> Job:
    failure = None if body.reason is None else (body.reason, body.message or "")
    member = (body.rank, body.checkpoint_latest)
    if job.status.members:
        return reports.report_complete(
            state.ctx, job, body.worker, body.exit_code, body.signal, body.attempt, failure, member
        )
    job, _ = transitions.record_checkpoint_latest(job, body.checkpoint_latest)
    return reports.report_complete(
        state.ctx, job, body.worker, body.exit_code, body.signal, body.attempt, failure, member
    )


def _checkpoint_complete(state: BrokerState, job: Job, body: Report) -> Job:
    return reports.record_checkpoint_complete(state.ctx, job, body.worker, body.attempt, body.rank)


def _progress(state: BrokerState, job: Job, body: ProgressReport) -> Job:
    sample = body.model_dump(include={"step", "total", "metrics"}, exclude_none=True)
    return reports.report_progress(state.ctx, job, body.worker, sample, body.attempt, body.rank)


# What each report does; its body is models.REPORT_BODIES[verb].
_REPORTS: dict[str, Callable[[BrokerState, Job, Any], Job]] = {
    "started": _started,
    "stopping": _stopping,
    "complete": _complete,
    "checkpoint-complete": _checkpoint_complete,
    "progress": _progress,
}


def _report_route(verb: str) -> FastRoute:
    """The route of one report, answered as every JSON body is (fastpath.answer)."""
    run = _REPORTS[verb]

    def run_report(state: BrokerState, job_id: int, body: Any) -> Job:
        return run(state, reported_job_or_404(state, job_id), body)

    async def report(state: BrokerState, path: PathArgs, body: Any, who: Principal) -> str:
        # A worker token reports as its own worker only; fencing (transitions.fence)
        # refuses a job not bound to that worker, or another run of it.
        access.as_worker(who, body.worker)
        # On the store's thread off the loop: it reads the view's bound jobs by key only.
        return doc(await state.ctx.runner.run(run_report, state, path["job_id"], body))

    report.__name__ = verb.replace("-", "_")
    return FastRoute(routes.REPORTS[verb], report)


REPORT_ROUTES = [_report_route(verb) for verb in _REPORTS]
for _fast in REPORT_ROUTES:
    declare(router, _fast)


def _check_sender(state: BrokerState, name: str, instance: str | None, epoch: int | None) -> None:
    """A report of an instance that does not hold the worker's lease changes nothing (409)."""
    worker = state.ctx.view.workers.get(name)
    if worker is not None:
        lease_holder.check_holder(worker, instance, epoch)


# What refuses one report of a batch and not the others; answered with the status every
# route gives it (ERROR_STATUSES). Anything else fails the whole request.
_REFUSED: tuple[type[Exception], ...] = (NotFound, Conflict, TransitionError)


async def report_batch(
    state: BrokerState, path: PathArgs, body: ReportBatch, who: Principal
) -> str:
    """Runs each report in order as its own route would; one refused does not stop the rest.

    A busy worker sends what piled up while its previous request was in flight: a
    job's `started` and `complete` reports often travel together, with its events. All
    of a batch is written in one transaction, with one commit; so are the binds of
    queued jobs into the room its reports freed on the worker (verbs/refill.py).
    """
    access.as_worker(who, path["name"])
    name = path["name"]
    ends = any(item.verb == "complete" for item in body.reports)

    def prepare() -> refill.Refill | None:
        return refill.room_of(state.ctx, name) if ends else None

    def unit(plan: refill.Refill | None) -> dict[str, Any]:
        return run_report_batch(state, name, body, who, plan)

    answer = await state.ctx.runner.run_prepared(prepare, unit)
    return encode_json(answer)


REPORT_BATCH = FastRoute(routes.REPORT_BATCH, report_batch, inspect.getdoc(report_batch))
declare(router, REPORT_BATCH)


def run_report_batch(
    state: BrokerState,
    name: str,
    body: ReportBatch,
    who: Principal | None = None,
    plan: refill.Refill | None = None,
) -> dict[str, Any]:
    _check_sender(state, name, body.instance, body.epoch)  # refuses the whole batch
    with state.store.batch():
        if _claimed(state, name, "reports", body.delivery):
            return _apply_reports(state, name, body, who, plan)
    return _acknowledged(state, body)


def _apply_reports(
    state: BrokerState,
    name: str,
    body: ReportBatch,
    who: Principal | None,
    plan: refill.Refill | None,
) -> dict[str, Any]:
    """Each report of the batch, its events and the refill, in the caller's batch."""
    results: list[dict[str, Any]] = []
    written: dict[int, Job] = {}  # what this batch wrote, not yet committed nor in the view
    state.store.hold_jobs([item.job for item in body.reports])  # one lock for them all
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
    events = _records(state, name, body.events, who)
    if events:
        state.store.append_events(events)
    if plan is not None:
        refill.refill(state.ctx, plan, written.values())
    return {"results": results, "events": len(events)}


def _claimed(state: BrokerState, worker: str, stream: str, delivery: Delivery | None) -> bool:
    """Whether the request is to be applied: it names no delivery, or one not applied
    before (then claimed, in the caller's transaction)."""
    if delivery is None:
        return True
    return state.store.claim_delivery(worker, stream, delivery.run, delivery.seq)


def _acknowledged(state: BrokerState, body: ReportBatch) -> dict[str, Any]:
    """The answer to a batch applied before: each report taken, with its job's phase now."""
    results: list[dict[str, Any]] = []
    for item in body.reports:
        job = state.ctx.view.bound.get(item.job) or state.store.get_job(item.job)
        phase = {} if job is None else {"phase": str(job.status.phase)}
        results.append({"job": item.job, "status": 200, **phase})
    return {"results": results, "events": len(body.events)}


def _records(
    state: BrokerState, worker: str, events: list[WorkerEvent], who: Principal | None
) -> list[EventRecord]:
    """The events as records; a worker token's, only those of its own jobs (or of no job).

    The worker's time goes to `observed_at`; the store stamps `ts` at the commit.

    An event about a job bound to another worker is dropped, not refused: it is a record
    of what the worker saw, and refusing the request would also lose the rest.
    """
    if who is not None and who.role == "worker":
        events = [e for e in events if e.job is None or _bound_here(state, e.job, worker)]
    return [EventRecord(e.event, job=e.job, worker=worker, fields=_observed(e)) for e in events]


def _observed(event: WorkerEvent) -> dict[str, Any]:
    """The event's fields with the worker's time as `observed_at`: its `ts` is the commit's
    (given by the store), so events.jsonl's times rise with its lines (CONTRACT.md §7)."""
    return {**event.fields, "observed_at": event.ts or None}


def _bound_here(state: BrokerState, job_id: int, worker: str) -> bool:
    bound = state.ctx.view.bound.get(job_id) or state.store.get_job(job_id)
    return bound is not None and runs_on(bound, worker)


@route(router, routes.APPEND_LOGS)
async def append_logs(
    request: Request, job_id: int, query: Annotated[LogsAppendQuery, Query()]
) -> Response:
    state = state_of(request)
    data = await request.body()
    job = _member_job(principal_of(request), reported_job_or_404(state, job_id), query.rank)
    end = state.logs.append(job, query.offset, data, state.ctx.clock.now(), query.rank)
    return json_response({"offset": end})


def _member_job(who: Principal, job: Job, rank: int) -> Job:
    """The job, if `who` may write rank `rank`'s output: a worker token only as the worker
    running that member (a multi-host job's members each run on their own worker)."""
    if who.role != "worker" or not job.status.members:
        return access.job(who, job)
    member = next((m for m in job.status.members if m.rank == rank), None)
    if member is None or member.worker != who.worker:
        raise access.Forbidden(
            f"rank {rank} of job {job.id} does not run on worker {who.worker!r}; "
            f"token {who.label!r} may write only that worker's members' output"
        )
    return job


async def ingest_events(
    state: BrokerState, _path: PathArgs, body: WorkerEvents, who: Principal
) -> str:
    access.as_worker(who, body.worker)
    records = _records(state, body.worker, body.events, who)
    return encode_json(await state.ctx.runner.run(_ingest, state, body, records))


def _ingest(state: BrokerState, body: WorkerEvents, records: list[EventRecord]) -> Any:
    """The events appended, once per delivery (a repeat is acknowledged alike)."""
    with state.store.batch():
        if _claimed(state, body.worker, "events", body.delivery):
            state.store.append_events(records)
    return {"accepted": len(records)}


INGEST_EVENTS = FastRoute(routes.INGEST_EVENTS, ingest_events)
declare(router, INGEST_EVENTS)


__all__ = ["FAST", "router"]

FAST = (HEARTBEAT, REPORT_BATCH, REGISTER, *REPORT_ROUTES, INGEST_EVENTS)
