"""Placement of jobs of several nodes (gangs), as pure policy: N distinct workers or none,
capacity counted on every member's worker, room held on every nominated worker, victims
on several workers for one gang, a gang victim counted once, and the words that say why
a gang waits (placement's Unschedulable, `job explain`)."""

from __future__ import annotations

from datetime import UTC, datetime
from itertools import count
from typing import Any

import pytest

from jobd.api.models import (
    Job,
    JobSpec,
    JobStatus,
    Member,
    ObjectMeta,
    Phase,
    Resources,
    Worker,
    WorkerSpec,
)
from jobd.cli.explaining import explanation_lines
from jobd.controllers import transitions
from jobd.controllers.capacity import (
    capacity_of,
    choose_gang,
    choose_worker,
    give_back,
    hold_for,
    nominated_on,
    room_on_its_way,
)
from jobd.controllers.errors import AdmissionError, TransitionError
from jobd.controllers.explain import Cluster, Queue, explain
from jobd.controllers.placement import placement_message, shapes_of
from jobd.controllers.quotas import Held
from jobd.controllers.rooms import RoomIndex
from jobd.controllers.verbs.admission import refuse_pinned_gang
from jobd.controllers.victims import choose_victims, may_yield_to

T0 = datetime(2026, 1, 1, tzinfo=UTC)
_ids = count(1)


def _worker(name: str, gpus: int = 0, slots: int = 1, **spec: Any) -> Worker:
    return Worker(
        metadata=ObjectMeta(name=name),
        spec=WorkerSpec(slots=slots, gpus=list(range(gpus)), **spec),
    )


def _job(
    priority: int = 10, nodes: int = 1, gpus: int = 0, gpu_memory: int | None = None, **spec: Any
) -> Job:
    resources = Resources(gpus=gpus, gpu_memory=gpu_memory)
    job = Job(
        metadata=ObjectMeta(id=next(_ids), name="j"),
        spec=JobSpec(command=["true"], nodes=nodes, resources=resources, **spec),
    )
    job.status.effective.priority = priority
    job.status.effective.preemptible = True
    return job


def _running(worker: str, priority: int = 1, gpus: list[int] | None = None) -> Job:
    job = _job(priority, gpus=len(gpus or []))
    job.status = JobStatus(
        phase=Phase.RUNNING,
        worker=worker,
        gpus=gpus or [],
        started_at=T0,
        effective=job.status.effective,
    )
    return job


def _running_gang(workers: list[str], priority: int = 1, gpus: int = 0) -> Job:
    """A gang running one member on each of `workers`, GPUs 0..gpus-1 on each."""
    job = _job(priority, nodes=len(workers), gpus=gpus)
    held = list(range(gpus))
    members = [
        Member(rank=r, worker=w, gpus=held, phase=Phase.RUNNING) for r, w in enumerate(workers)
    ]
    job.status = JobStatus(
        phase=Phase.RUNNING,
        worker=workers[0],
        gpus=held,
        members=members,
        started_at=T0,
        effective=job.status.effective,
    )
    return job


def _any(job: Job) -> bool:
    return job.status.phase == Phase.RUNNING


# -- the choice of N workers


def test_a_gang_of_three_on_two_workers_is_placed_nowhere_and_holds_nothing() -> None:
    caps = capacity_of([_worker("a"), _worker("b")], [])
    gang = _job(nodes=3)
    assert choose_gang(gang, caps) is None
    assert RoomIndex(caps).place(gang) is None
    assert [(c.free_slots, c.reserved) for c in caps.values()] == [(1, {}), (1, {})]


def test_a_gang_gets_distinct_workers_best_fit_each_time() -> None:
    # The rule single jobs have, once per member on the workers left: least GPU memory
    # given first (b's 24 GiB, then c's 40), so a's 80 GiB GPU stays free for a big job.
    gib = 1 << 30
    workers = [
        _worker("a", gpus=1, gpu_memory={0: 80 * gib}),
        _worker("b", gpus=1, gpu_memory={0: 24 * gib}),
        _worker("c", gpus=1, gpu_memory={0: 40 * gib}),
    ]
    caps = capacity_of(workers, [])
    gang = _job(nodes=2, gpus=1, gpu_memory=20 * gib)
    chosen = choose_gang(gang, caps)
    assert chosen is not None
    assert [c.worker for c in chosen] == ["b", "c"]
    left = dict(caps)
    for cap in chosen:
        assert choose_worker(gang, left) is cap, "choose_worker's choice, member by member"
        del left[cap.worker]
    index = RoomIndex(caps)
    index.choose(_job())  # the index's first choice walks; the next ones weigh rooms
    seats = index.place(gang)
    assert isinstance(seats, list)
    assert [c.worker for c in seats] == ["b", "c"], "the index chooses as choose_gang"
    assert len(index) == 3, "the chosen workers are back in the index"


def test_twins_are_told_apart_by_name_and_never_chosen_twice() -> None:
    workers = [_worker(f"w{i}", gpus=1) for i in range(4)]
    caps = capacity_of(workers, [])
    index = RoomIndex(caps)
    index.choose(_job())
    seats = index.place(_job(nodes=4, gpus=1))
    assert isinstance(seats, list)
    assert sorted(c.worker for c in seats) == ["w0", "w1", "w2", "w3"]
    assert index.place(_job(nodes=5, gpus=1)) is None


def test_a_nominated_gang_goes_only_to_its_nominated_workers() -> None:
    caps = capacity_of([_worker("a"), _worker("b"), _worker("c")], [])
    gang = _job(nodes=2)
    gang.status.nominated_worker, gang.status.nominated_workers = "c", ["c", "a"]
    hold_for([gang], caps)
    assert {n: list(c.reserved) for n, c in caps.items()} == {
        "a": [gang.id],
        "b": [],
        "c": [gang.id],
    }
    seats = choose_gang(gang, caps)
    assert seats is not None and [c.worker for c in seats] == ["c", "a"]
    assert choose_gang(_job(nodes=2), caps) is None, "the held room is no other job's"
    assert nominated_on(gang) == ["c", "a"]


def test_a_gang_is_acted_for_again_when_any_nominated_worker_is_gone() -> None:
    # Reclaim and the sweeper skip a job whose room is already being freed; for a gang
    # that holds only while every nominated worker is there, not just rank 0's.
    gang = _job(nodes=2)
    gang.status.nominated_worker, gang.status.nominated_workers = "a", ["a", "b"]
    both = capacity_of([_worker("a"), _worker("b"), _worker("c")], [])
    assert room_on_its_way(gang, both)
    without_b = capacity_of([_worker("a"), _worker("c")], [])
    assert not room_on_its_way(gang, without_b), "rank 1's worker is gone: act anew"
    without_a = capacity_of([_worker("b"), _worker("c")], [])
    assert not room_on_its_way(gang, without_a)
    single = _job()
    assert not room_on_its_way(single, both), "never nominated: nothing on its way"
    single.status.nominated_worker = "c"
    assert room_on_its_way(single, both)
    assert not room_on_its_way(single, capacity_of([_worker("a")], []))


# -- what a bound gang holds


def test_a_bound_gang_holds_its_room_on_every_member_worker() -> None:
    gang = _running_gang(["a", "b"], gpus=2)
    caps = capacity_of([_worker("a", gpus=4), _worker("b", gpus=2), _worker("c", gpus=2)], [gang])
    assert {n: c.free_gpus for n, c in caps.items()} == {"a": [2, 3], "b": [], "c": [0, 1]}
    cpu_gang = _running_gang(["a", "c"])
    slots = capacity_of([_worker("a"), _worker("b"), _worker("c")], [cpu_gang])
    assert {n: c.free_slots for n, c in slots.items()} == {"a": 0, "b": 1, "c": 0}
    give_back(caps["b"], gang)
    give_back(caps["c"], gang)  # no member there: nothing to give back
    assert (caps["b"].free_gpus, caps["c"].free_gpus) == ([0, 1], [0, 1])


def test_bind_gang_fills_the_members_and_makes_one_run() -> None:
    gang = _job(nodes=2, gpus=1)
    gang.status.nominated_worker, gang.status.nominated_workers = "b", ["b", "a"]
    members = [
        Member(rank=0, worker="b", address="10.0.0.2", gpus=[1]),
        Member(rank=1, worker="a", address="10.0.0.1", gpus=[0]),
    ]
    bound, events = transitions.bind_gang(gang, members, T0)
    status = bound.status
    assert (status.phase, status.worker, status.gpus, status.attempt) == (
        Phase.SCHEDULED,
        "b",
        [1],
        1,
    )
    assert [(m.rank, m.worker, m.address, m.gpus) for m in status.members] == [
        (0, "b", "10.0.0.2", [1]),
        (1, "a", "10.0.0.1", [0]),
    ]
    assert (status.nominated_worker, status.nominated_workers) == (None, [])
    [event] = events
    assert (event.event, event.worker, event.fields["workers"]) == (
        "job_scheduled",
        "b",
        ["b", "a"],
    )
    assert gang.status.phase == Phase.PENDING, "the job given is not changed"


def test_a_quota_counts_a_gang_once_per_node() -> None:
    held = Held()
    held.add(_job(nodes=2, gpus=8))
    assert (held.gpus, held.jobs) == (16, 1)


def test_a_gang_pinned_to_one_worker_is_refused_naming_the_field() -> None:
    with pytest.raises(AdmissionError, match=r"^spec\.worker: a job of 2 nodes"):
        refuse_pinned_gang(_job(nodes=2, worker="a"))
    refuse_pinned_gang(_job(nodes=1, worker="a"))
    refuse_pinned_gang(_job(nodes=2))


# -- preemption


def test_victims_are_chosen_on_several_workers_for_one_gang() -> None:
    bound = [_running("a", 1), _running("b", 2), _running("c", 3)]
    caps = capacity_of([_worker("a"), _worker("b"), _worker("c")], bound)
    plan = choose_victims(_job(10, nodes=2), caps, bound, _any)
    assert plan is not None
    assert plan.workers == ["a", "b"], "the cheapest workers: lowest priority victims"
    assert [v.id for v in plan.victims] == [bound[0].id, bound[1].id]


def test_a_gang_that_cannot_be_given_all_its_workers_preempts_nothing() -> None:
    # Only a and b hold preemptible jobs; c's job is of a higher priority.
    bound = [_running("a", 1), _running("b", 1), _running("c", 50)]
    caps = capacity_of([_worker("a"), _worker("b"), _worker("c")], bound)
    plan = choose_victims(_job(10, nodes=3), caps, bound, lambda j: may_yield_to(j, 10))
    assert plan is None


def test_a_worker_free_already_is_taken_before_any_victim() -> None:
    bound = [_running("a", 1), _running("b", 1)]
    caps = capacity_of([_worker("a"), _worker("b"), _worker("c")], bound)
    plan = choose_victims(_job(10, nodes=2), caps, bound, _any)
    assert plan is not None
    assert plan.workers == ["c", "a"] and [v.id for v in plan.victims] == [bound[0].id]


def test_a_gang_victim_is_one_victim_and_frees_all_its_workers() -> None:
    # A running gang on a and b, a single job on c. A gang of two needs two workers:
    # stopping the gang frees both, one victim; the single job would be a second.
    running = _running_gang(["a", "b"], priority=1)
    single = _running("c", priority=1)
    bound = [running, single]
    caps = capacity_of([_worker("a"), _worker("b"), _worker("c")], bound)
    plan = choose_victims(_job(10, nodes=2), caps, bound, _any)
    assert plan is not None
    assert [v.id for v in plan.victims] == [running.id], "the gang, once"
    assert sorted(plan.workers) == ["a", "b"]


def test_a_gang_victim_frees_room_for_a_job_of_one_node() -> None:
    running = _running_gang(["a", "b"], priority=1, gpus=2)
    caps = capacity_of([_worker("a", gpus=2), _worker("b", gpus=2)], [running])
    plan = choose_victims(_job(10, gpus=2), caps, [running], _any)
    assert plan is not None and plan.gang == []
    assert [v.id for v in plan.victims] == [running.id]


def test_a_gang_on_its_way_out_counts_as_room_on_every_worker() -> None:
    leaving = _running_gang(["a", "b"], priority=1)
    leaving.status.desired_phase = Phase.PREEMPTED
    caps = capacity_of([_worker("a"), _worker("b")], [leaving])
    plan = choose_victims(_job(10, nodes=2), caps, [leaving], _any)
    assert plan is not None and plan.victims == [] and sorted(plan.workers) == ["a", "b"]


# -- the words: Unschedulable, job explain


def test_placement_says_how_many_workers_a_gang_needs_and_how_many_can() -> None:
    workers = [_worker("a", gpus=8), _worker("b", gpus=8), _worker("c", gpus=2)]
    spec = _job(nodes=3, gpus=8).spec
    assert placement_message(spec, shapes_of(workers)) == (
        "needs 3 workers that can hold it, 2 can"
    )
    assert placement_message(_job(nodes=2, gpus=8).spec, shapes_of(workers)) is None
    assert placement_message(_job(nodes=3).spec, shapes_of(workers)) is None
    assert placement_message(_job(nodes=4).spec, shapes_of(workers)) == (
        "needs 4 workers that can hold it, 3 can"
    )
    too_big = placement_message(_job(nodes=2, gpus=16).spec, shapes_of(workers))
    assert too_big == "no worker has 16 GPUs; the largest has 8"


def test_explain_says_a_gang_needs_n_workers_and_which_could_take_a_member() -> None:
    workers = [_worker("a"), _worker("b")]
    gang = _job(nodes=3)
    answer = explain(gang, Cluster(workers, {"a", "b"}, []), Queue(now=T0))
    assert answer["reason"] == "Unschedulable"
    assert answer["message"] == "needs 3 workers that can hold it, 2 can"
    assert answer["gang"]["fit"] == ["a", "b"]
    assert answer["gang"]["says"] == (
        "it needs 3 workers with room for a member each at once; 2 could take a member now: a, b"
    )
    assert answer["preemption"]["possible"] is False


def test_explain_of_a_gang_short_of_room_now_names_the_workers_that_could() -> None:
    workers = [_worker("a"), _worker("b"), _worker("c")]
    bound = [_running("c", priority=1)]
    gang = _job(nodes=3)
    answer = explain(gang, Cluster(workers, {"a", "b", "c"}, bound), Queue(now=T0))
    assert answer["reason"] == "WaitingForCapacity"
    assert answer["message"].endswith("2 could take a member now: a, b")
    assert answer["preemption"]["possible"] is True
    assert answer["preemption"]["workers"] == ["a", "b", "c"]
    assert answer["preemption"]["says"].endswith(f"job {bound[0].id} (priority 1) on a, b, c")


@pytest.mark.parametrize("phase", list(Phase), ids=str)
def test_the_gang_moves_apply_only_where_bind_and_nominate_do(phase: Phase) -> None:
    """bind_gang is the table's BIND and nominate_gang its NOMINATE, phase by phase."""
    gang = _job(nodes=2)
    gang.status.phase = phase
    members = [Member(rank=0, worker="a"), Member(rank=1, worker="b")]
    moves = [
        (
            lambda: transitions.bind(gang, "a", [], T0),
            lambda: transitions.bind_gang(gang, members, T0),
        ),
        (
            lambda: transitions.nominate(gang, "a", T0),
            lambda: transitions.nominate_gang(gang, ["a", "b"], T0),
        ),
    ]
    for single, whole in moves:
        try:
            moved, _ = single()
        except TransitionError as refused:
            with pytest.raises(TransitionError, match=str(refused)):
                whole()
            continue
        assert whole()[0].status.phase == moved.status.phase


def test_job_explain_prints_the_gang_block_and_nothing_new_for_one_node() -> None:
    workers = [_worker("a"), _worker("b")]
    gang_answer = explain(_job(nodes=3), Cluster(workers, {"a", "b"}, []), Queue(now=T0))
    said = "\n".join(explanation_lines(gang_answer))
    assert "  Nodes:" in said and "2 could take a member now: a, b" in said
    single = explain(_job(), Cluster(workers, {"a", "b"}, []), Queue(now=T0))
    assert "gang" not in single and "Nodes" not in "\n".join(explanation_lines(single))
