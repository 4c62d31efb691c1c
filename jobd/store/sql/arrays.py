"""Job arrays in the store: an array's row and its member jobs, written all or nothing."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from jobd.api.arrays import JobArray
from jobd.api.models import Job, assign, utcnow
from jobd.store import schema as t
from jobd.store.base import Conflict
from jobd.store.sql.jobs import EventsFor, SQLJobs

__all__ = ["SQLArrays"]


class SQLArrays(SQLJobs):
    """The arrays' table; its members are jobs, inserted and deleted as jobs are."""

    def create_array(
        self,
        array: JobArray,
        members: Sequence[Job],
        on_id: Callable[[int], None],
        events_for: EventsFor | None = None,
    ) -> JobArray:
        """Insert an array and its member jobs in one transaction: all, or nothing.

        `on_id(array_id)` runs once the array has its id and before anything is written,
        to name the array and its members (the members' names hold the array's). The
        array's `status.jobs` is filled with the members' ids, in their order.
        """
        with self.batch(durable=True), self._tx(durable=True) as tx:
            array_id = tx.reserve("array_id", 1)
            on_id(array_id)
            created = self._insert_jobs(members, events_for, _note_last_member)
            assign(array.metadata, id=array_id, created_at=utcnow(), generation=1)
            array.status.jobs = [job.id for job in created]
            row = {
                "id": array_id,
                "project": array.project,
                "name": array.metadata.name,
                "body": array.model_dump_json(by_alias=True, exclude_none=True),
            }
            try:
                tx.conn.execute(sa.insert(t.arrays).values(row))
            except IntegrityError:
                raise Conflict(f"array {array.ref} already exists") from None
        return array

    def get_array(self, array_id: int) -> JobArray | None:
        rows = self._rows(sa.select(t.arrays.c.body).where(t.arrays.c.id == array_id))
        return JobArray.model_validate_json(rows[0].body) if rows else None

    def get_array_by_name(self, project: str, name: str) -> JobArray | None:
        found = self.list_arrays(project=project, name=name)
        return found[0] if found else None

    def list_arrays(
        self,
        *,
        project: str | None = None,
        projects: Iterable[str] | None = None,
        name: str | None = None,
    ) -> list[JobArray]:
        query = sa.select(t.arrays.c.body).order_by(t.arrays.c.id)
        if project is not None:
            query = query.where(t.arrays.c.project == project)
        if projects is not None:
            query = query.where(t.arrays.c.project.in_(list(projects)))
        if name is not None:
            query = query.where(t.arrays.c.name == name)
        return [JobArray.model_validate_json(row.body) for row in self._rows(query)]

    def delete_array(self, array: JobArray) -> None:
        """Remove the array's row (its members are jobs, deleted as jobs are)."""
        with self._tx(durable=True) as tx:  # inside batch(): the batch's commit
            tx.conn.execute(sa.delete(t.arrays).where(t.arrays.c.id == array.id))


def _note_last_member(members: list[Job]) -> None:
    """Each member's ArrayRef names the last member's id (ids are reserved in one block)."""
    last = members[-1].id if members else None
    for job in members:
        if job.metadata.array is not None:
            job.metadata.array.last_member = last
