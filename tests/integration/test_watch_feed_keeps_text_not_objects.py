"""The watch's in-memory feed keeps each change's text and worker, not its objects.

A watcher gets the same entries from the memory tail as from the store behind it, and
the tail holds one small object a change, not the jobs' models.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobd.api.models import Job, JobSpec, ObjectMeta, Phase
from jobd.broker.streams.feed import ChangeFeed, FeedEntry
from jobd.store.sql import SQLStore, open_store


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLStore]:
    opened = open_store(f"sqlite:///{tmp_path}/jobd.db")
    yield opened
    opened.close()


def _listening(store: SQLStore, feed: ChangeFeed) -> ChangeFeed:
    """The feed hears the store's commits, as the broker's wiring registers it."""
    store.subscribe(feed.on_commit)
    return feed


def _bound_and_free(store: SQLStore) -> None:
    jobs = [Job(metadata=ObjectMeta(name=n), spec=JobSpec(command=["true"])) for n in "ab"]
    bound, _free = store.create_jobs(jobs)
    moved = bound.evolve()
    moved.status.phase, moved.status.worker = Phase.SCHEDULED, "gpu-1"
    store.update_job(moved)


def _for(worker: str) -> object:
    return lambda entry: entry.worker == worker


def test_a_worker_watch_sees_its_own_jobs_from_memory_and_from_the_store(
    store: SQLStore,
) -> None:
    roomy, tiny = _listening(store, ChangeFeed(store)), _listening(store, ChangeFeed(store, size=1))
    _bound_and_free(store)

    from_memory = roomy.since(0, _for("gpu-1"))  # type: ignore[arg-type]
    from_store = tiny.since(0, _for("gpu-1"))  # type: ignore[arg-type]

    assert from_memory == from_store
    assert [(e.op, e.worker) for e in from_memory] == [("MODIFIED", "gpu-1")]
    assert Job.model_validate_json(from_memory[0].text).status.worker == "gpu-1"
    everything = roomy.since(0, lambda entry: True)
    assert [e.kind for e in everything] == ["Job"] * 3 and everything[0].worker is None


def test_the_tail_holds_no_committed_object(store: SQLStore) -> None:
    feed = _listening(store, ChangeFeed(store))
    _bound_and_free(store)
    entries = feed.since(0, lambda entry: True)
    assert entries and all(isinstance(e, FeedEntry) for e in entries)
    held = {
        type(part) for entry in entries for part in gc.get_referents(entry) if part is not FeedEntry
    }
    assert held <= {int, str, bool, type(None)}  # bool: whether the job had started
