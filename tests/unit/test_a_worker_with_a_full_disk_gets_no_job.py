"""A worker whose heartbeat says its disk is full offers no room until it says otherwise;
an agent that never says (an older one) is never taken for full."""

from __future__ import annotations

from datetime import UTC, datetime

from jobd.api.models import ObjectMeta, Worker, WorkerSpec
from jobd.controllers.capacity import capacity_of
from jobd.controllers.worker_disk import DISK_FULL, disk_is_full, note_disk

T0 = datetime(2026, 1, 1, tzinfo=UTC)
T1 = datetime(2026, 1, 1, 0, 1, tzinfo=UTC)
WHY = "the disk of the worker's state directory /srv/w1 is full (4096 bytes free)"


def _worker() -> Worker:
    return Worker(metadata=ObjectMeta(name="w1"), spec=WorkerSpec(slots=2))


def test_a_full_disk_takes_the_worker_out_of_placement_until_space_is_back() -> None:
    worker = _worker()
    assert note_disk(worker, WHY, T0)
    assert disk_is_full(worker) and capacity_of([worker], []) == {}
    [condition] = worker.status.conditions
    assert (condition.type, condition.status, condition.message) == (DISK_FULL, "True", WHY)
    assert not note_disk(worker, WHY, T1)  # said again: nothing to write

    assert note_disk(worker, None, T1)
    assert not disk_is_full(worker) and capacity_of([worker], [])["w1"].free_slots == 2
    [condition] = worker.status.conditions
    assert (condition.status, condition.last_transition_time) == ("False", T1)


def test_a_worker_that_never_said_its_disk_is_full_has_no_condition() -> None:
    worker = _worker()
    assert not note_disk(worker, None, T0)
    assert worker.status.conditions == [] and "w1" in capacity_of([worker], [])
