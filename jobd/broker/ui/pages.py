"""The dashboard's pages: the job list, a job, the workers, the preemption timeline.

Each page asks the broker what the API's routes ask, through the same functions and
with the session's principal in their place (`find_jobs`, `access.job`, the store's
listings narrowed by `access.projects`), and shows documents as the API answers them
(`responses.doc`: secret env values masked). The parts a live stream re-renders
(`jobs_rows`, `job_live`) are functions here, so the page and its stream show the same.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import Path, Request, Response
from pydantic import ValidationError

from jobd.api.manifests import dump_yaml
from jobd.api.models import Job, Phase
from jobd.api.vocabulary import MAX_ID
from jobd.broker.auth import access
from jobd.broker.auth.access import principal_of
from jobd.broker.auth.tokens import Principal
from jobd.broker.http.responses import doc, validation_detail
from jobd.broker.routes.jobs import find_jobs
from jobd.broker.state import BrokerState, job_or_404, state_of
from jobd.broker.ui.login import signed_in_router
from jobd.broker.ui.rendering import fragment, page
from jobd.broker.ui.timeline import preemptions
from jobd.controllers import workers as worker_leases
from jobd.controllers.errors import AdmissionError
from jobd.controllers.gangs import gpus_on
from jobd.store.base import EventRecord, Store
from jobd.wire.models import JobsQuery
from jobd.wire.routes import DASHBOARD

__all__ = ["JobId", "job_live", "jobs_asked", "jobs_rows", "router"]

router = signed_in_router()

SHOWN_JOBS = 500  # the newest of a listing; filters narrow it
SHOWN_PREEMPTIONS = 200
_EVENT_PAGES = 50  # of 1000 events each: how far back the timeline reads
_FILTERS = {"project": "project", "phase": "phase", "label": "selector"}  # shown: JobsQuery's
JobId = Annotated[int, Path(ge=1, le=MAX_ID)]


def _document(job: Job) -> dict[str, Any]:
    """The job as the API shows it, as plain data for a template."""
    found: dict[str, Any] = json.loads(doc(job))
    return found


# -- the job list


def jobs_asked(request: Request) -> JobsQuery:
    """The list's filters (`project`, `phase`, `label`, as a selector) as the API's query;
    AdmissionError (422) naming the filter that does not validate."""
    asked: dict[str, Any] = {}
    for shown, field in _FILTERS.items():
        value = request.query_params.get(shown, "").strip()
        if value:
            asked[field] = [value] if field == "phase" else value
    try:
        return JobsQuery.model_validate(asked)
    except ValidationError as exc:
        detail = validation_detail(exc.errors())
        for shown, field in _FILTERS.items():
            detail = detail.replace(f"{field}.0:", f"{shown}:").replace(f"{field}:", f"{shown}:")
        raise AdmissionError(detail) from None


def jobs_rows(state: BrokerState, who: Principal, query: JobsQuery) -> str:
    found = find_jobs(state, who, query)
    newest = [_document(job) for job in reversed(found[-SHOWN_JOBS:])]
    return fragment("_jobs_rows.html", jobs=newest, more=max(0, len(found) - SHOWN_JOBS))


@router.get(DASHBOARD.jobs)
async def jobs(request: Request) -> Response:
    state, who = state_of(request), principal_of(request)
    query = jobs_asked(request)
    seen = access.projects(who)
    stored = {p.name for p in state.store.list_projects()}
    projects = stored if seen is None else seen  # a user's token names its own
    return page(
        "jobs.html",
        who=who,
        rows=jobs_rows(state, who, query),
        projects=sorted(projects),
        phases=[str(p) for p in Phase],
        asked={shown: request.query_params.get(shown, "") for shown in _FILTERS},
        stream_query=request.url.query,
    )


# -- one job


def job_live(state: BrokerState, who: Principal, job_id: int) -> str:
    """What a job's page keeps current: status, progress, conditions, events."""
    job = access.job(who, job_or_404(state, job_id))
    events = state.store.list_events(job=job_id, limit=500, projects=access.projects(who))
    return fragment("_job_live.html", job=_document(job), events=[e.as_json() for e in events])


@router.get(DASHBOARD.job)
async def job_page(request: Request, job_id: JobId) -> Response:
    state, who = state_of(request), principal_of(request)
    job = _document(access.job(who, job_or_404(state, job_id)))
    spec = dump_yaml([{"metadata": job["metadata"], "spec": job["spec"]}])
    return page("job.html", who=who, job=job, spec=spec, live=job_live(state, who, job_id))


# -- workers


@router.get(DASHBOARD.workers)
async def workers(request: Request) -> Response:
    state, who = state_of(request), principal_of(request)
    seen = access.projects(who)
    shown = []
    for worker in state.store.list_workers():
        worker.status.last_renewal = worker_leases.last_renewal(state.ctx, worker)
        worker.status.gpu_usage = state.gpu_readings.of(worker)  # NVML's newest, if any
        bound = state.ctx.view.bound_to(worker.name)
        mine = [_document(j) for j in bound if seen is None or j.project in seen]
        used = sorted(g for j in bound for g in gpus_on(j, worker.name))
        shown.append(
            {
                "doc": json.loads(doc(worker)),
                "jobs": mine,
                "others": len(bound) - len(mine),
                "slots_used": sum(j.spec.resources.slots for j in bound),
                "gpus_used": used,
            }
        )
    return page("workers.html", who=who, workers=shown)


# -- the preemption timeline


def _events(store: Store, event: str, seen: frozenset[str] | None) -> list[EventRecord]:
    found: list[EventRecord] = []
    for _ in range(_EVENT_PAGES):
        after = found[-1].seq if found else 0
        batch = store.list_events(event=event, after_seq=after, limit=1000, projects=seen)
        found += batch
        if len(batch) < 1000:
            break
    return found


@router.get(DASHBOARD.timeline)
async def timeline(request: Request) -> Response:
    state, who = state_of(request), principal_of(request)
    seen = access.projects(who)
    decided = _events(state.store, "auto_preempt", seen)[-SHOWN_PREEMPTIONS:]
    checkpoints = _events(state.store, "checkpoint_complete", seen)
    jobs: dict[int, dict[str, Any]] = {}
    for job_id in {e.job for e in decided if e.job is not None}:
        victim = state.store.get_job(job_id)
        if victim is None:
            continue
        jobs[job_id] = _document(victim)
        resumed = victim.status.resumed_by
        found = state.store.get_job(resumed) if resumed is not None else None
        if found is not None:
            jobs[found.id] = _document(found)
    entries = preemptions(decided, checkpoints, jobs)
    return page("timeline.html", who=who, entries=entries)
