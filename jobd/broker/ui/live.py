"""The dashboard's live parts, as server-sent events (EventSource in static/ui.js).

Three streams, each fed by what the API's own long-polls wait on: a job's output from
`JobLogs` (read by byte offset, woken as chunks arrive: the source of `job logs -f`),
and a job's or the job list's state from the change feed (`ChangeFeed.wait_since`, the
source of `/watch`), re-read and re-rendered with the very templates of the page.

Every event's data is text (lines of HTML or of output); a log event's id is the byte
offset after it, so a browser that reconnects resumes where it stopped (Last-Event-ID).
Streams end when the broker stops (its notifiers are closed), when the session does (its
token revoked, its 12 hours up: looked at between events, at least every 15 s), or when
the browser leaves.
"""

from __future__ import annotations

import codecs
from collections.abc import AsyncIterator, Callable

import anyio
from fastapi import Request
from fastapi.responses import StreamingResponse

from jobd.broker.auth import access
from jobd.broker.auth.access import Forbidden, principal_of
from jobd.broker.state import job_or_404, state_of
from jobd.broker.streams.feed import FeedEntry
from jobd.broker.ui.login import session_lasts, signed_in_router
from jobd.broker.ui.pages import JobId, job_live, jobs_asked, jobs_rows
from jobd.broker.ui.rendering import HEADERS
from jobd.store.base import NotFound
from jobd.wire.routes import DASHBOARD

__all__ = ["router"]

router = signed_in_router()

TAIL_LINES = 1000  # the output a job's page opens with; the rest is in `job logs`
_KEEPALIVE_S = 15.0
_MIN_GAP_S = 0.5
Accept = Callable[[FeedEntry], bool]  # which changes may change what a stream shows
_LOG_WAIT_S = 2.0  # a log wait is short: a job's notifier is made afresh after each wake


def sse(event: str, data: str, event_id: int | None = None) -> str:
    """One server-sent event; `data` may hold newlines (each is a `data:` line)."""
    head = f"id: {event_id}\n" if event_id is not None else ""
    lines = data.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    return head + f"event: {event}\n" + "".join(f"data: {line}\n" for line in lines) + "\n"


def _stream(events: AsyncIterator[str]) -> StreamingResponse:
    headers = {**HEADERS, "X-Accel-Buffering": "no"}  # a proxy must not hold events back
    return StreamingResponse(events, media_type="text/event-stream", headers=headers)


def _ending(request: Request) -> bool:
    """The broker is stopping (its notifiers are closed), or the session is over."""
    return state_of(request).feed.changed.closed or not session_lasts(request)


@router.get(DASHBOARD.job_log_stream)
async def log_stream(request: Request, job_id: JobId) -> StreamingResponse:
    state = state_of(request)
    access.job(principal_of(request), job_or_404(state, job_id))
    resumed = request.headers.get("last-event-id", "")
    if resumed.isdigit():
        offset = int(resumed)
    else:
        offset = state.logs.start(job_id, 0, TAIL_LINES, None, state.ctx.clock.now())
    return _stream(_output(request, job_id, offset))


async def _output(request: Request, job_id: int, offset: int) -> AsyncIterator[str]:
    """The job's output from `offset` as it arrives; `end` once the job ended and all of
    its output was sent."""
    state = state_of(request)
    decode = codecs.getincrementaldecoder("utf-8")(errors="replace").decode
    quiet = 0.0
    while not _ending(request):
        notifier = state.logs.notifier(job_id)
        found = state.logs.read(job_id, offset)
        if found.data:
            offset, quiet = found.next_offset, 0.0
            yield sse("log", decode(found.data), offset)
            continue
        job = state.store.get_job(job_id)
        if job is None or (job.status.phase.terminal and found.next_offset >= found.end):
            yield sse("end", "")
            return
        await notifier.wait(_LOG_WAIT_S)
        quiet += _LOG_WAIT_S
        if quiet >= _KEEPALIVE_S:
            quiet = 0.0
            yield ": keepalive\n\n"


@router.get(DASHBOARD.job_stream)
async def job_stream(request: Request, job_id: JobId) -> StreamingResponse:
    state, who = state_of(request), principal_of(request)
    job = access.job(who, job_or_404(state, job_id))
    project = job.project

    def render() -> str | None:
        try:
            return job_live(state, who, job_id)
        except (NotFound, Forbidden):  # deleted, or no longer the token's to see
            return None

    return _stream(_renders(request, render, _jobs_of(frozenset({project}))))


@router.get(DASHBOARD.jobs_stream)
async def jobs_stream(request: Request) -> StreamingResponse:
    state, who = state_of(request), principal_of(request)
    query = jobs_asked(request)  # refused as the page is
    seen = access.projects(who)

    def render() -> str | None:
        try:
            return jobs_rows(state, who, query)
        except Forbidden:  # the token's projects changed
            return None

    return _stream(_renders(request, render, _jobs_of(seen)))


def _jobs_of(projects: frozenset[str] | None) -> Accept:
    """Changes of the jobs of these projects (None: of every project)."""

    def accept(entry: FeedEntry) -> bool:
        return entry.kind == "Job" and (projects is None or entry.project in projects)

    return accept


async def _renders(
    request: Request, render: Callable[[], str | None], accept: Accept
) -> AsyncIterator[str]:
    """`render()` as an `html` event whenever what it shows may have changed (a commit
    `accept` passes) and it differs from what was sent last; `gone` when it answers None."""
    state = state_of(request)
    revision, sent = state.feed.revision, ""
    while not _ending(request):
        shown = render()
        if shown is None:
            yield sse("gone", "")
            return
        if shown != sent:
            sent = shown
            yield sse("html", shown)
            await anyio.sleep(_MIN_GAP_S)  # a busy cluster: two renders a second at most
        revision, changes = await state.feed.wait_since(revision, accept, _KEEPALIVE_S)
        if not changes:
            yield ": keepalive\n\n"
