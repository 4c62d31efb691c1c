"""Projects in the store: named objects, put and deleted by compare-and-swap."""

from __future__ import annotations

import sqlalchemy as sa

from jobd.api.models import Project
from jobd.store import schema as t
from jobd.store.sql.cas import SQLCompareAndSwap

__all__ = ["SQLProjects"]


class SQLProjects(SQLCompareAndSwap):
    """The projects' table; every write is durable (what `job project` was told)."""

    def put_project(self, project: Project) -> Project:
        return self._put_named("Project", t.projects, project, [], durable=True)

    def delete_project(self, project: Project) -> None:
        with self._tx(durable=True) as tx:
            self._delete(tx, "Project", t.projects.c.name, project.name, project)

    def get_project(self, name: str) -> Project | None:
        rows = self._rows(sa.select(t.projects.c.body).where(t.projects.c.name == name))
        return Project.model_validate_json(rows[0].body) if rows else None

    def list_projects(self) -> list[Project]:
        rows = self._rows(sa.select(t.projects.c.body).order_by(t.projects.c.name))
        return [Project.model_validate_json(row.body) for row in rows]
