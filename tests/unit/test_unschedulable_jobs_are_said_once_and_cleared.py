"""A job no worker could run: the message naming the largest worker, the condition said
once with its event, and gone when some worker could run it."""

from __future__ import annotations

from jobd.api.models import Phase, Resources
from jobd.controllers import transitions
from jobd.controllers.placement import Shape, unschedulable_message
from tests.unit.conftest import NOW, job_in


def test_the_message_names_what_is_missing_and_the_largest_worker() -> None:
    shapes = {Shape(4, (0, 0, 0, 0)), Shape(8, (0, 0))}
    assert unschedulable_message(Resources(gpus=5), shapes) == (
        "no worker has 5 GPUs; the largest has 4"
    )
    assert unschedulable_message(Resources(gpus=1), {Shape(1, ())}) == (
        "no worker has 1 GPU; the largest has 0"
    )
    assert unschedulable_message(Resources(gpus=4), shapes) is None
    assert unschedulable_message(Resources(), {Shape(1, ())}) is None, "a CPU job needs only a slot"


def test_gpu_memory_is_judged_per_gpu_on_one_worker() -> None:
    gib = 1 << 30
    shapes = {Shape(2, (80 * gib, 24 * gib)), Shape(1, (40 * gib, 40 * gib))}
    assert unschedulable_message(Resources(gpus=1, gpu_memory=80 * gib), shapes) is None
    assert unschedulable_message(Resources(gpus=2, gpu_memory=40 * gib), shapes) is None
    assert unschedulable_message(Resources(gpus=2, gpu_memory=48 * gib), shapes) == (
        "no worker has 2 GPUs with 48GiB each (at most 1 GPU on one worker with that much; "
        "the largest GPU has 80GiB)"
    )
    assert unschedulable_message(Resources(gpus=1, gpu_memory="100GiB"), shapes) == (
        "no worker has 1 GPU with 100GiB each (no GPU with that much; the largest GPU has 80GiB)"
    )
    unknown = {Shape(1, (0,))}
    assert unschedulable_message(Resources(gpus=1, gpu_memory=gib), unknown) == (
        "no worker has 1 GPU with 1GiB each (no GPU with that much; no GPU's memory is known)"
    )


def test_with_no_worker_nothing_is_said() -> None:
    assert unschedulable_message(Resources(gpus=8), set()) is None


def test_the_condition_and_its_event_come_once() -> None:
    job = job_in(Phase.PENDING, worker=None)
    said, events = transitions.unschedulable(job, "no worker has 5 GPUs; the largest has 4", NOW)
    cond = next(c for c in said.status.conditions if c.type == "Scheduled")
    assert (cond.status, cond.reason) == ("False", "Unschedulable")
    assert [e.event for e in events] == ["job_unschedulable"]
    again, events = transitions.unschedulable(said, cond.message, NOW)
    assert again is said and events == []
    newer, events = transitions.unschedulable(said, "no worker has 5 GPUs; the largest has 2", NOW)
    assert events == [], "the same verdict with a new message is no new event"
    assert newer.status.conditions[-1].message.endswith("the largest has 2")


def test_the_condition_goes_when_a_worker_could_run_it() -> None:
    said, _ = transitions.unschedulable(job_in(Phase.PENDING), "no worker has 5 GPUs", NOW)
    cleared, events = transitions.placeable(said)
    scheduled = [c for c in cleared.status.conditions if c.type == "Scheduled"]
    assert [(c.status, c.reason) for c in scheduled] == [("False", "WaitingForCapacity")]
    assert events == []
    assert transitions.placeable(cleared)[0] is cleared
