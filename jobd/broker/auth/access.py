"""Authorization: who may call each route, and what each principal may touch.

Two steps, both here. The auth middleware (auth.py) resolves the request's principal
once and checks the route against `ROLES`: a worker token never reaches a route that
creates or cancels a job, a user token never a worker's report. The handler then asks
this module about the objects it is about to read or change (`job`, `as_worker`,
`projects`, ...), which raise `Forbidden` (403), naming the project or worker.

- *admin*: everything (root and `--admin-group` over the socket, an admin token).
- *user*: the jobs of its projects (submit, read, cancel, preempt, resume, delete, logs,
  events, watch); workers and its projects read-only. A *person* (a user with a Unix
  user: the socket's peer, a user token of a user, a worker's vouching; people.py)
  reaches the projects it is a member of, reads every job there, and changes (cancel,
  preempt, resume, delete) only its own, unless an admin of the project (`change`).
- *worker*: registers, heartbeats and reports as its own worker only; reads its bound
  jobs and their changes; never creates, cancels or changes a job, nor cordons.

Secret env values (api/secrets.py) are masked on every read but the two an agent makes
naming its worker — `GET /jobs?worker=W` and `GET /watch?worker=W` — and there only for
a principal that may speak as W (`reveals`): W's worker token, or an admin token (which
can make W's token anyway, and is what `jobd dev`'s worker holds).
"""

from __future__ import annotations

from starlette.requests import Request

from jobd.api.arrays import JobArray
from jobd.api.models import Job
from jobd.broker.auth.tokens import ADMIN, USER, WORKER, Principal
from jobd.wire import routes as r
from jobd.wire.routes import Route

__all__ = [
    "PRINCIPAL",
    "ROLES",
    "Forbidden",
    "Revoked",
    "as_worker",
    "change",
    "job",
    "jobs_visible",
    "principal_of",
    "project",
    "projects",
    "refusal",
    "reveals",
    "stamp_owner",
]

PRINCIPAL = "jobd.principal"  # the key of the request's principal in the ASGI scope


class Forbidden(Exception):
    """The token is valid, but not for this (HTTP 403); the message names what it lacks."""


class Revoked(Exception):
    """The request's token was revoked while it was held (HTTP 401, as any invalid token)."""


_ANY = frozenset({ADMIN, USER, WORKER})
_USERS = frozenset({ADMIN, USER})
_WORKERS = frozenset({ADMIN, WORKER})
_ADMINS = frozenset({ADMIN})

# Who may call each route at all; a test holds that every authenticated route is here.
ROLES: dict[Route, frozenset[str]] = {
    r.APPLY: _USERS,
    r.CREATE_JOB: _USERS,
    r.LIST_JOBS: _ANY,  # a worker: its bound jobs only (jobs_visible)
    r.GET_JOB: _ANY,
    r.DELETE_JOB: _USERS,
    r.CANCEL_JOB: _USERS,
    r.PREEMPT_JOB: _USERS,
    r.PREEMPT_BLOCKERS: _USERS,
    r.EXPLAIN_JOB: _USERS,
    r.RESUME_JOB: _USERS,
    r.READ_LOGS: _USERS,
    r.CREATE_ARRAY: _USERS,
    r.LIST_ARRAYS: _USERS,
    r.GET_ARRAY: _USERS,
    r.CANCEL_ARRAY: _USERS,
    r.DELETE_ARRAY: _USERS,
    r.REGISTER_WORKER: _WORKERS,
    r.HEARTBEAT: _WORKERS,
    r.LIST_WORKERS: _USERS,
    r.GET_WORKER: _ANY,
    r.CORDON_WORKER: _ADMINS,
    r.UNCORDON_WORKER: _ADMINS,
    r.DRAIN_WORKER: _ADMINS,
    **{report: _WORKERS for report in r.REPORTS.values()},
    r.REPORT_BATCH: _WORKERS,
    r.APPEND_LOGS: _WORKERS,
    r.INGEST_EVENTS: _WORKERS,
    r.WATCH: _ANY,
    r.LIST_EVENTS: _USERS,
    r.LIST_PROJECTS: _USERS,
    r.GET_PROJECT: _USERS,
    r.USAGE: _USERS,
    r.WHOAMI: _ANY,
    r.CREATE_TOKEN: _ADMINS,
    r.LIST_TOKENS: _ADMINS,
    r.REVOKE_TOKEN: _ADMINS,
    r.LOGIN_CODE: _USERS,  # the dashboard shows jobs: what a user or admin token reads
    r.OPENAPI: _ANY,
}


def refusal(who: Principal, route: Route) -> str | None:
    """Why `who` may not call `route` at all; None: it may (the handler checks the rest)."""
    if who.role in ROLES[route]:
        return None
    return f"a {who.role} token may not call {route.method} {route.path} ({route.summary})"


def principal_of(request: Request) -> Principal:
    who: Principal = request.scope[PRINCIPAL]
    return who


# -- what a principal may touch


def project(who: Principal, name: str) -> None:
    """A user may act in its projects only; workers never on their own account."""
    if who.role == ADMIN or (who.role == USER and name in who.projects):
        return
    mine = ", ".join(sorted(who.projects)) or "none"
    if who.person:
        raise Forbidden(
            f"user {who.user!r} is not a member of project {name!r} (their projects: {mine}; "
            "a project's members and admins say who may use it)"
        )
    if who.role == USER:
        raise Forbidden(f"token {who.label!r} may not act in project {name!r} (only in {mine})")
    raise Forbidden(f"a {who.role} token may not act in project {name!r}")


def projects(who: Principal) -> frozenset[str] | None:
    """The projects a principal sees; None: every project (admins)."""
    if who.role == ADMIN:
        return None
    return who.projects  # empty for a worker token: it sees jobs by binding instead


def job(who: Principal, found: Job) -> Job:
    """`found`, if `who` may read or act on it: its project's user, or its bound worker."""
    if who.role == WORKER:
        if found.status.worker != who.worker and not _member_worker(found, who.worker):
            raise Forbidden(
                f"job {found.id} is not bound to worker {who.worker!r}; "
                f"token {who.label!r} may touch only that worker's jobs"
            )
        return found
    project(who, found.project)
    return found


def _member_worker(job: Job, worker: str | None) -> bool:
    """Whether `worker` runs a member of a multi-host job (reads its secrets, appends
    its logs, reports on its member)."""
    return any(m.worker == worker for m in job.status.members)


def change(who: Principal, found: Job | JobArray) -> None:
    """Whether `who` may change `found` (cancel, preempt, resume, delete): any reader of it,
    but a person only their own, unless an admin of its project (403 naming why)."""
    if isinstance(found, Job):
        job(who, found)
    else:
        project(who, found.project)
    if not who.person or found.metadata.owner == who.user or found.project in who.admin_of:
        return
    what = f"job {found.id}" if isinstance(found, Job) else f"array A{found.id}"
    owner = found.metadata.owner
    whose = f"{owner!r}'s" if owner else "of no owner"
    raise Forbidden(
        f"{what} is {whose}: user {who.user!r} changes only their own jobs in project "
        f"{found.project!r} (the project's admins change any)"
    )


def jobs_visible(who: Principal, project_asked: str | None, worker_asked: str | None) -> None:
    """Refuse a listing outside the principal's scope (a user's other project, a worker's
    other worker); the listing itself is narrowed by the caller."""
    if who.role == USER and project_asked is not None:
        project(who, project_asked)
    if who.role == WORKER and worker_asked != who.worker:
        raise Forbidden(
            f"token {who.label!r} may list only the jobs of worker {who.worker!r} "
            f"(ask with worker={who.worker})"
        )


def stamp_owner(who: Principal, resource: Job | JobArray) -> None:
    """Set `resource`'s owner from the identity of who made it, never from its body.

    The caller's user when it has one (the socket's peer, a user token's user). An admin
    of no user (the admin token) may name an owner, as root may `sbatch --uid`: a job
    submitted on a user's behalf; anyone else's body value is dropped.
    """
    meta = resource.metadata
    if who.user is not None:
        meta.owner = who.user
    elif who.role != ADMIN:
        meta.owner = None


def as_worker(who: Principal, name: str) -> None:
    """A worker token speaks only as its own worker."""
    if not _speaks_as(who, name):
        raise Forbidden(f"token {who.label!r} may not act as worker {name!r}")


def reveals(who: Principal | None, worker_asked: str | None) -> bool:
    """Whether a read of the jobs bound to `worker_asked` shows their secret env values:
    only to a principal that may speak as that worker (module docstring). A user token,
    even of the job's own project, never sees them."""
    return who is not None and worker_asked is not None and _speaks_as(who, worker_asked)


def _speaks_as(who: Principal, name: str) -> bool:
    return who.role == ADMIN or (who.role == WORKER and who.worker == name)
