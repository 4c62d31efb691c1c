"""Health, readiness, metrics (public); the watch, events and projects (authenticated)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import PlainTextResponse, Response
from pydantic import BaseModel, Field

from jobd.api.models import Phase
from jobd.broker.feed import FeedEntry
from jobd.broker.responses import RawJSON, doc, json_response
from jobd.broker.state import BrokerState, state_of
from jobd.store.base import NotFound

public = APIRouter(tags=["system"])
router = APIRouter(tags=["system"])


@public.get("/healthz", summary="Liveness")
async def healthz() -> Response:
    return json_response({"status": "ok"})


@public.get("/readyz", summary="Readiness: the store answers")
async def readyz(request: Request) -> Response:
    ok = state_of(request).store.ping()
    return PlainTextResponse(
        "ok\n" if ok else "store unreachable\n", status_code=200 if ok else 503
    )


@public.get("/metrics", summary="Prometheus text exposition")
async def metrics(request: Request) -> Response:
    state = state_of(request)
    counts = state.store.count_jobs_by_phase()
    lines = ["# HELP jobd_jobs Jobs by phase.", "# TYPE jobd_jobs gauge"]
    lines += [f'jobd_jobs{{phase="{p.value}"}} {counts.get(p.value, 0)}' for p in Phase]
    workers = state.store.list_workers()
    lines += ["# HELP jobd_workers Workers by status.", "# TYPE jobd_workers gauge"]
    for status in ("Ready", "Lost"):
        n = sum(1 for w in workers if w.status.phase == status)
        lines.append(f'jobd_workers{{status="{status}"}} {n}')
    oldest = state.store.list_jobs(phases=[Phase.PENDING], ready=True, limit=1)
    age = 0.0
    if oldest and oldest[0].status.queued_at:
        age = (datetime.now(UTC) - oldest[0].status.queued_at).total_seconds()
    lines += [
        "# HELP jobd_queue_oldest_age_seconds Wait of the oldest job queued for capacity.",
        "# TYPE jobd_queue_oldest_age_seconds gauge",
        f"jobd_queue_oldest_age_seconds {age:.3f}",
        "# HELP jobd_store_revision The store's newest revision.",
        "# TYPE jobd_store_revision counter",
        f"jobd_store_revision {state.feed.revision}",
    ]
    return PlainTextResponse("\n".join(lines) + "\n", media_type="text/plain; version=0.0.4")


class WatchQuery(BaseModel):
    """The watch's query parameters (also parsed by FastRoutes, see fastpath.py)."""

    since: int = Field(default=0, ge=0)
    kind: str | None = None
    worker: str | None = None
    timeout: float = Field(default=30.0, ge=0, le=300)


@router.get("/watch", summary="Changes after a revision; held until one arrives")
async def watch(request: Request, query: Annotated[WatchQuery, Query()]) -> Response:
    return json_response(await run_watch(state_of(request), query))


async def run_watch(state: BrokerState, query: WatchQuery) -> dict[str, Any]:
    kind, worker = query.kind, query.worker

    def accept(entry: FeedEntry) -> bool:
        if kind is not None and entry.kind != kind:
            return False
        return worker is None or entry.worker == worker

    revision, changes = await state.feed.wait_since(
        query.since, accept, query.timeout, worker=worker
    )
    items = [
        {"revision": c.revision, "kind": c.kind, "op": c.op, "object": RawJSON(c.text)}
        for c in changes
    ]
    return {"revision": revision, "changes": items}


@router.get("/events", summary="The event record (events.jsonl), optionally followed")
async def events(
    request: Request,
    job: int | None = None,
    type: str | None = None,
    after: Annotated[int, Query(ge=0)] = 0,
    follow: bool = False,
    timeout: Annotated[float, Query(ge=0, le=300)] = 30.0,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
) -> Response:
    state = state_of(request)
    found = state.store.list_events(job=job, event=type, after_seq=after, limit=limit)
    if follow and not found:
        await state.feed.events_added.wait(timeout)
        found = state.store.list_events(job=job, event=type, after_seq=after, limit=limit)
    items = [ev.as_json() | {"seq": ev.seq} for ev in found]
    return json_response({"items": items, "last": found[-1].seq if found else after})


@router.get("/projects", summary="List projects")
async def list_projects(request: Request) -> Response:
    return json_response({"items": [doc(p) for p in state_of(request).store.list_projects()]})


@router.get("/projects/{name}", summary="One project")
async def get_project(request: Request, name: str) -> Response:
    project = state_of(request).store.get_project(name)
    if project is None:
        raise NotFound(f"project {name} not found")
    return json_response(doc(project))
