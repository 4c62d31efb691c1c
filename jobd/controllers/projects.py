"""Projects: the `--projects` file kept applied, and defaults flowing into jobs.

The file (the seed's `projects.yaml` form, or Project documents) is applied at start
and again whenever its content changes. When a project changes, the effective priority,
preemptibility and grace of its unfinished jobs are resolved again, field by field, so
a project default is never silently un-inherited.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path

import anyio

from jobd.api.manifests import ManifestError, load_path, parse_resource
from jobd.api.models import TERMINAL_PHASES, Phase, Project
from jobd.controllers.context import Context
from jobd.controllers.queueing import DONE, Result
from jobd.controllers.verbs.admission import apply_project, resolve_effective
from jobd.logconfig import get_logger
from jobd.store.base import Change, Conflict

__all__ = ["ProjectsController", "load_projects_file", "watch_projects_file"]

log = get_logger()
_LIVE_PHASES = [p for p in Phase if p not in TERMINAL_PHASES]


def load_projects_file(path: Path) -> list[Project]:
    """Every Project in the file; anything else in it is an error naming its line."""
    projects = []
    for doc in load_path(path):
        resource = parse_resource(doc)
        if not isinstance(resource, Project):
            raise ManifestError(
                f"{doc.source}:{doc.line}: kind: only Project documents belong here"
            )
        projects.append(resource)
    return projects


def apply_projects_file(ctx: Context, path: Path) -> None:
    for project in load_projects_file(path):
        result = apply_project(ctx.store, project, dry_run=False)
        if result.action != "unchanged":
            log.info(
                "project_applied", project=project.name, action=result.action, source=str(path)
            )


async def watch_projects_file(ctx: Context, path: Path, interval_s: float = 1.0) -> None:
    """Apply the file now and whenever its content changes; a bad edit is logged, not fatal."""
    digest = None
    while True:
        try:
            data = path.read_bytes()
        except OSError as exc:
            log.warning("projects_file_unreadable", path=str(path), error=str(exc))
            data = b""
        current = hashlib.sha256(data).hexdigest()
        if data and current != digest:
            try:
                apply_projects_file(ctx, path)
                digest = current
            except (ManifestError, Conflict) as exc:
                log.error("projects_file_rejected", path=str(path), error=str(exc))
                digest = current
        await anyio.sleep(interval_s)


class ProjectsController:
    """Per-project key: re-resolve the effective settings of its unfinished jobs."""

    name = "projects"
    resync_s = 0.0

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    def keys_for(self, change: Change) -> Iterable[str]:
        return [change.key] if change.kind == "Project" else []

    def keys_all(self) -> Iterable[str]:
        return []

    async def reconcile(self, key: str) -> Result:
        project = self.ctx.store.get_project(key)
        for job in self.ctx.store.list_jobs(project=key, phases=_LIVE_PHASES):
            effective = resolve_effective(job, project)
            if effective == job.status.effective:
                continue
            job = job.evolve()
            job.status.effective = effective
            try:
                self.ctx.store.update_job(job)
            except Conflict:
                return Result(requeue_after=0)
        return DONE
