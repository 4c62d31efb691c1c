"""A watch woken by a commit answers with what that commit set off in the same turn of the
loop too (the scheduler's binds after a report freed a slot): one answer, not two."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from jobd.api.models import Job, JobSpec, ObjectMeta, Phase
from jobd.broker.streams.feed import ChangeFeed
from jobd.store.sql import SQLStore, open_store

pytestmark = pytest.mark.anyio


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLStore]:
    opened = open_store(f"sqlite:///{tmp_path}/jobd.db")
    yield opened
    opened.close()


async def _bind(store: SQLStore, job: Job) -> None:
    moved = job.evolve()
    moved.status.phase, moved.status.worker = Phase.SCHEDULED, "w1"
    store.update_job(moved)


async def test_the_answer_holds_the_commit_and_the_one_it_set_off(store: SQLStore) -> None:
    feed = ChangeFeed(store)
    store.subscribe(feed.on_commit)
    jobs = store.create_jobs(
        [Job(metadata=ObjectMeta(name=n), spec=JobSpec(command=["true"])) for n in "ab"]
    )
    start = feed.revision
    answers: list[list[int]] = []

    async def watch() -> None:
        def mine(entry: object) -> bool:
            return getattr(entry, "worker", None) == "w1"

        _, found = await feed.wait_since(start, mine, 5.0, worker="w1")
        answers.append([entry.revision for entry in found])

    async with anyio.create_task_group() as tg:
        tg.start_soon(watch)
        await anyio.wait_all_tasks_blocked()
        await _bind(store, jobs[0])  # wakes the watch
        tg.start_soon(_bind, store, jobs[1])  # what that commit set off, next in line
    assert len(answers) == 1 and len(answers[0]) == 2
