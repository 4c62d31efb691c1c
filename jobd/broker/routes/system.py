"""Health, readiness, metrics (public); the watch, events and projects (authenticated)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import PlainTextResponse, Response

from jobd.api.models import ObjectMeta, Project
from jobd.api.selectors import parse_selector
from jobd.api.vocabulary import TERMINAL_PHASES
from jobd.broker.auth import access
from jobd.broker.auth.access import principal_of
from jobd.broker.auth.tokens import Principal
from jobd.broker.http.fastpath import FastRoute, PathArgs, declare
from jobd.broker.http.responses import RawJSON, doc, encode_json, json_response
from jobd.broker.http.routing import route
from jobd.broker.metrics.registry import exposition
from jobd.broker.state import BrokerState, job_or_404, state_of
from jobd.broker.streams.feed import FeedEntry, Filter, jobs_filter
from jobd.controllers.fairshare import standings
from jobd.store.base import EventRecord, NotFound
from jobd.wire import routes
from jobd.wire.models import EventsQuery, Health, UsageReport, WatchQuery, WhoAmI

public = APIRouter(tags=["system"])
router = APIRouter(tags=["system"])


# Documented beside the JSON of FastAPI's default, which then also holds for the refusals.
_TEXT: dict[str, Any] = {"content": {"text/plain": {"schema": {"type": "string"}}}}


@route(
    public,
    routes.HEALTHZ,
    response_model=Health,
    responses={503: {"model": Health, "description": "A loop of the broker is being restarted"}},
)
async def healthz(request: Request) -> Response:
    """Alive, and every loop of the broker running (one that failed is being restarted)."""
    down = state_of(request).tasks_down
    if down:
        return json_response({"status": "failing", "loops": down}, status_code=503)
    return json_response({"status": "ok"})


@route(
    public,
    routes.READYZ,
    responses={200: _TEXT, 503: {**_TEXT, "description": "The store cannot be reached or written"}},
)
async def readyz(request: Request) -> Response:
    """Ready: the store answers, and its last write succeeded (broker/storage.py); the
    body says whether this broker leads or stands by (broker/leadership.py)."""
    state = state_of(request)
    store = state.store
    failed = store.write_error
    if failed is None and store.ping():
        return PlainTextResponse("leader\n" if state.leadership.is_leader else "standby\n")
    reason = str(failed) if failed is not None else f"the store at {store.where} is unreachable"
    return PlainTextResponse(reason + "\n", status_code=503)


@route(public, routes.METRICS, responses={200: _TEXT})
async def metrics(request: Request) -> Response:
    """Prometheus' scrape (broker/metrics/registry.py): OpenMetrics when the Accept header asks."""
    body, content_type = exposition(state_of(request).metrics, request.headers.get("accept"))
    return Response(body, media_type=content_type)


async def watch(state: BrokerState, _path: PathArgs, query: WatchQuery, who: Principal) -> str:
    return encode_json(await run_watch(state, query, who))


async def run_watch(
    state: BrokerState, query: WatchQuery, who: Principal | None = None
) -> dict[str, Any]:
    kind, worker = query.kind, query.worker
    if who is not None:  # a worker watches its own jobs only; a user, its projects'
        access.jobs_visible(who, query.project, worker)
    reveal = access.reveals(who, worker)  # every change passed is of a job bound there
    seen = access.projects(who) if who is not None and who.role == "user" else None
    jobs = _jobs_filter(query)
    skip_own_reports = query.skip_own_reports

    def accept(entry: FeedEntry) -> bool:
        if kind is not None and entry.kind != kind:
            return False
        if skip_own_reports and _own_report(entry):
            return False  # the agent never acts on one, nor wakes for it
        if seen is not None and entry.kind != "Worker" and entry.project not in seen:
            return False
        if jobs is not None and not jobs(entry):
            return False
        return worker is None or entry.bound_to(worker)

    revision, changes = await state.feed.wait_since(
        query.since, accept, query.timeout, worker=worker
    )
    if who is not None and not state.tokens.holds(who):  # revoked while the watch was held
        raise access.Revoked(f"token {who.label!r} has been revoked")
    items = [
        {
            "revision": c.revision,
            "kind": c.kind,
            "op": c.op,
            "object": RawJSON(c.text if reveal else c.masked),
        }
        for c in changes
    ]
    return {"revision": revision, "changes": items}


def _own_report(entry: FeedEntry) -> bool:
    """Whether a change is what its worker's own report made: a job with no signal that
    runs (`started`, `progress`) or ended after it started (`complete`). A bind, a stop
    asked, the end of a job never started (cancelled while Scheduled) are not. An end the
    broker decides of a started job (its worker lost, its process vanished) is left out
    too: its agent runs it no more, or hears of it in its next heartbeat's `stop`."""
    if entry.kind != "Job" or entry.signal is not None or entry.op == "DELETED":
        return False
    return entry.phase == "Running" or (entry.started and entry.phase in _ENDED)


_ENDED = frozenset(phase.value for phase in TERMINAL_PHASES)


def _jobs_filter(query: WatchQuery) -> Filter | None:
    """The listing's filters the watch was given, as the feed applies them."""
    selector = parse_selector(query.selector) if query.selector is not None else None
    return jobs_filter(query.project, query.name, query.phase, selector)


WATCH = FastRoute(routes.WATCH, watch)
declare(router, WATCH)


@route(router, routes.LIST_EVENTS)
async def events(request: Request, query: Annotated[EventsQuery, Query()]) -> Response:
    state, who = state_of(request), principal_of(request)
    job, limit = query.job, query.limit
    after = state.store.last_event_seq() if query.from_now else query.after
    if job is not None and not who.admin:
        access.job(who, job_or_404(state, job))
    seen = access.projects(who)

    def found_now() -> list[EventRecord]:
        return state.store.list_events(
            job=job, event=query.type, after_seq=after, limit=limit, projects=seen
        )

    found = found_now()
    if query.follow and not found:
        await state.feed.events_added.wait(query.timeout)
        found = found_now()
    items = [ev.as_json() | {"seq": ev.seq} for ev in found]
    return json_response({"items": items, "last": found[-1].seq if found else after})


@route(router, routes.LIST_PROJECTS)
async def list_projects(request: Request) -> Response:
    seen = access.projects(principal_of(request))
    found = state_of(request).store.list_projects()
    return json_response({"items": [doc(p) for p in found if seen is None or p.name in seen]})


@route(router, routes.USAGE, response_model=UsageReport)
async def usage(request: Request) -> Response:
    """Fair share's standings (controllers/fairshare.py), of the projects one may see."""
    seen = access.projects(principal_of(request))
    ctx = state_of(request).ctx
    view = ctx.view
    found = standings(
        ctx.usage, view.bound.values(), view.projects, ctx.settings.billing, ctx.clock.now()
    )
    if seen is not None:
        found["projects"] = [r for r in found["projects"] if r["project"] in seen]
        found["users"] = [r for r in found["users"] if r["project"] in seen]
    return json_response(found)


@route(router, routes.GET_PROJECT)
async def get_project(request: Request, name: str) -> Response:
    access.project(principal_of(request), name)
    state = state_of(request)
    project = state.store.get_project(name)
    if project is None and state.tokens.names_project(name):
        # Not declared, but a token was made for it: it is a project, of the defaults
        # (as its first job will find it), not a mistake to report.
        project = Project(metadata=ObjectMeta(name=name))
    if project is None:
        raise NotFound(f"project {name} not found")
    return json_response(doc(project))


@route(router, routes.WHOAMI, response_model=WhoAmI)
async def whoami(request: Request) -> Response:
    """Who the broker knows the caller as, and what it reaches (`job whoami`)."""
    who = principal_of(request)
    seen = access.projects(who)
    return json_response(
        {
            "user": who.user,
            "uid": who.uid,
            "groups": list(who.groups),
            "role": who.role,
            "admin": who.admin,
            "via": who.via,
            "label": who.label,
            "projects": None if seen is None else sorted(seen),
            "admin_of": sorted(who.admin_of),
            "worker": who.worker,
        }
    )


__all__ = ["FAST", "public", "router", "run_watch"]

FAST = (WATCH,)
