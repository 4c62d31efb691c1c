"""The scheduler's index by free room (controllers/rooms.py) makes choose_worker's choice,
job after job, over fleets of every kind: mixed inventories, GPUs with and without known
memory, labels, mount roots, published users, room held for nominated jobs, jobs pinned,
selecting, asking where by affinity and cwd, of an owner or none, naming nothing. Each
choice is taken on both sides, so a worker moving from one room to another is part of what
is compared."""

from __future__ import annotations

import random
from itertools import count
from typing import Any

import pytest

from jobd.api.models import (
    Job,
    JobSpec,
    JobStatus,
    LabelExpression,
    ObjectMeta,
    Phase,
    Resources,
    Worker,
    WorkerSpec,
)
from jobd.controllers.capacity import (
    Capacity,
    capacity_of,
    choose_seat,
    choose_worker,
    reserve_nominated,
)
from jobd.controllers.rooms import RoomIndex
from jobd.controllers.view import ClusterView

GIB = 1 << 30
_SITES = ("lab0", "lab1", "lab2")
_ids = count(1)


def _gpu_memory(rng: random.Random, gpus: list[int]) -> dict[int, int]:
    return {g: rng.choice((24, 40, 80)) * GIB for g in gpus if rng.random() < 0.8}


def _spec_of_worker(rng: random.Random) -> WorkerSpec:
    gpus = list(range(rng.choice((0, 0, 1, 2, 4))))
    return WorkerSpec(
        slots=rng.choice((1, 2, 4, 8)),
        gpus=gpus,
        gpu_memory=_gpu_memory(rng, gpus),
        cpus=rng.choice((None, 2, 4, 8)),
        memory=rng.choice((None, 8 * GIB, 16 * GIB, 64 * GIB)),
        labels={"site": rng.choice(_SITES)} if rng.random() < 0.7 else {},
        mount_roots=rng.choice(([], [], ["/data"], ["/data", "/scratch"])),
    )


def _twins(rng: random.Random, base: WorkerSpec) -> list[WorkerSpec]:
    """Workers alike (what the index folds into one room), a few alike but for one thing
    it must tell apart: their GPUs' memory, their mount roots, their labels."""
    twins = []
    for _ in range(rng.randrange(1, 6)):
        spec = base.model_copy()
        roll = rng.random()
        if roll < 0.2:
            spec.gpu_memory = _gpu_memory(rng, spec.gpus)
        elif roll < 0.3:
            spec.mount_roots = rng.choice(([], ["/data"], ["/scratch"]))
        elif roll < 0.4:
            spec.labels = {"site": rng.choice(_SITES)}
        twins.append(spec)
    return twins


def _workers(rng: random.Random) -> list[Worker]:
    specs = [s for _ in range(rng.randrange(1, 10)) for s in _twins(rng, _spec_of_worker(rng))]
    rng.shuffle(specs)
    workers = [Worker(metadata=ObjectMeta(name=f"w{i:02d}"), spec=s) for i, s in enumerate(specs)]
    for worker in workers:  # the users a host publishes (None: it takes any owner)
        worker.status.users = rng.choice((None, None, ["alice"], ["alice", "bob"]))
    return workers


def _spec(rng: random.Random, workers: int) -> dict[str, Any]:
    where: dict[str, Any] = {}
    roll = rng.random()
    if roll < 0.1:
        where["worker"] = f"w{rng.randrange(workers + 1):02d}"  # one may not exist
    elif roll < 0.3:
        where["node_selector"] = {"site": rng.choice(_SITES)}
    elif roll < 0.4:
        values = [rng.choice(_SITES)]
        operator = rng.choice(("In", "NotIn"))
        where["node_affinity"] = [LabelExpression(key="site", operator=operator, values=values)]
    if rng.random() < 0.3:
        where["cwd"] = rng.choice(("/data/run", "/scratch/x", "/home/u"))
    gpus = rng.choice((0, 0, 0, 1, 2))
    resources = Resources(
        gpus=gpus,
        gpu_memory=rng.choice((None, 20 * GIB, 60 * GIB)) if gpus else None,
        cpus=rng.choice((None, None, 0.5, 1, 3)),
        memory=rng.choice((None, None, GIB, 6 * GIB)),
    )
    return {"resources": resources, **where}


def _job(rng: random.Random, workers: int) -> Job:
    owner = rng.choice((None, None, "alice", "bob"))
    return Job(
        metadata=ObjectMeta(id=next(_ids), name="j", owner=owner),
        spec=JobSpec(command=["true"], **_spec(rng, workers)),
    )


def _running(rng: random.Random, worker: Worker) -> Job:
    needs = Resources(cpus=rng.choice((None, 1, 2)), memory=rng.choice((None, 2 * GIB)))
    job = Job(
        metadata=ObjectMeta(id=next(_ids), name="r"),
        spec=JobSpec(command=["true"], resources=needs),
    )
    job.status = JobStatus(phase=Phase.RUNNING, worker=worker.name)
    return job


def _fleet(seed: int) -> tuple[random.Random, list[Worker], list[Job]]:
    rng = random.Random(seed)
    workers = _workers(rng)
    bound = [_running(rng, rng.choice(workers)) for _ in range(rng.randrange(0, 20))]
    return rng, workers, bound


def _nominated(rng: random.Random, workers: list[Worker]) -> list[Job]:
    """Queued jobs that room was freed for on a worker (preemption's nominated_worker)."""
    nominated = []
    for worker in rng.sample(workers, k=min(2, len(workers))):
        job = _job(rng, 0)
        job.spec.worker = None
        job.status.nominated_worker = worker.name
        nominated.append(job)
    return nominated


def _held(caps: dict[str, Capacity], nominated: list[Job]) -> dict[str, Capacity]:
    view = ClusterView.__new__(ClusterView)  # only what reserve_nominated reads
    view.nominated = {j.id: j for j in nominated}
    reserve_nominated(view, caps)
    return caps


def _compare(seed: int) -> int:
    """Place a shuffled queue on both sides, asserting each choice equal; how many placed."""
    rng, workers, bound = _fleet(seed)
    nominated = _nominated(rng, workers)
    walked = _held(capacity_of(workers, bound), nominated)
    rooms = RoomIndex(_held(capacity_of(workers, bound), nominated))
    queue = nominated + [_job(rng, len(workers)) for _ in range(60)]
    rng.shuffle(queue)
    placed = 0
    for job in queue:
        expected, got = choose_worker(job, walked), rooms.choose(job)
        assert (got and got.worker) == (expected and expected.worker), job.spec
        if expected is not None and got is not None:
            assert rooms.take(got, job) == expected.take(job)
            placed += 1
    return placed


@pytest.mark.parametrize("seed", range(60))
def test_each_choice_is_choose_workers(seed: int) -> None:
    _compare(seed)


def test_the_fleets_place_many_jobs_and_refuse_some() -> None:
    """The comparison means something: most queues place jobs, and stop short of all."""
    placed = [_compare(seed) for seed in range(60)]
    assert sum(1 for n in placed if n > 0) >= 50
    assert sum(1 for n in placed if n < 62) >= 50


def test_a_fleet_of_a_few_shapes_is_a_few_rooms() -> None:
    workers = [
        Worker(
            metadata=ObjectMeta(name=f"n{i:03d}"),
            spec=WorkerSpec(slots=8, cpus=16, memory=64 * GIB, labels={"site": _SITES[i % 3]}),
        )
        for i in range(300)
    ]
    rooms = RoomIndex(capacity_of(workers, []))
    assert len(rooms) == 3, "one room per site while every worker is empty"
    plain = Job(metadata=ObjectMeta(id=1, name="j"), spec=JobSpec(command=["true"]))
    chosen = rooms.choose(plain)
    assert chosen is not None and chosen.worker == "n299", "ties go to the last name"
    rooms.take(chosen, plain)
    assert len(rooms) == 4, "the worker that took it is a room of its own now"
    again = rooms.choose(plain)
    assert again is not None and again.worker == "n298", "most free slots first"


def _seats(seat: Capacity | list[Capacity] | None) -> list[str]:
    return [c.worker for c in _as_list(seat)]


def _compare_gangs(seed: int) -> int:
    """As _compare, with gangs of 2 and 3 nodes among the jobs: the index's choice of N
    workers is capacity.choose_gang's, job after job; how many gangs were placed."""
    rng, workers, bound = _fleet(seed)
    walked, rooms = capacity_of(workers, bound), RoomIndex(capacity_of(workers, bound))
    placed = 0
    for _ in range(40):
        job = _job(rng, len(workers))
        nodes = rng.choice((1, 2, 3))
        if nodes > 1:  # a gang is never pinned (admission refuses it)
            job.spec = job.spec.model_copy(update={"nodes": nodes, "worker": None})
        expected, got = choose_seat(job, walked), rooms.place(job)
        assert _seats(got) == _seats(expected), job.spec
        for want, have in zip(_as_list(expected), _as_list(got), strict=True):
            assert rooms.take(have, job) == want.take(job)
        placed += nodes > 1 and expected is not None
    return placed


def _as_list(seat: Capacity | list[Capacity] | None) -> list[Capacity]:
    if seat is None:
        return []
    return seat if isinstance(seat, list) else [seat]


def test_the_index_places_gangs_as_choose_gang() -> None:
    placed = [_compare_gangs(seed) for seed in range(40)]
    assert sum(1 for n in placed if n > 0) >= 30, "the comparison places gangs"
