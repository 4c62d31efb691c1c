"""Placement over every dimension at once (issue 23): a job naming CPUs and memory fits
where that much is free (and a slot, or its GPUs), best fit among workers; a job naming
neither holds none, so `--slots 8` on a small host still runs eight; preemption frees
what the job lacks; pins, selectors, affinity and mount roots say where it may run, and
a job no worker could ever take is told which rule kept each out."""

from __future__ import annotations

from datetime import UTC, datetime
from itertools import count
from typing import Any

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
from jobd.controllers.capacity import capacity_of, choose_worker
from jobd.controllers.eligibility import under_a_root, why_not
from jobd.controllers.placement import placement_message, shapes_of
from jobd.controllers.victims import choose_victims

GIB = 1 << 30
T0 = datetime(2026, 1, 1, tzinfo=UTC)
_ids = count(1)


def _worker(
    name: str, cpus: float | None, memory: int | None, slots: int = 8, **spec: Any
) -> Worker:
    return Worker(
        metadata=ObjectMeta(name=name),
        spec=WorkerSpec(slots=slots, cpus=cpus, memory=memory, **spec),
    )


def _job(
    cpus: float | None = None, memory: int | None = None, priority: int = 10, **spec: Any
) -> Job:
    job = Job(
        metadata=ObjectMeta(id=next(_ids), name="j"),
        spec=JobSpec(command=["true"], resources=Resources(cpus=cpus, memory=memory), **spec),
    )
    job.status.effective.priority = priority
    return job


def _running(worker: str, priority: int = 1, **needs: Any) -> Job:
    job = _job(priority=priority, **needs)
    job.status = JobStatus(
        phase=Phase.RUNNING, worker=worker, started_at=T0, effective=job.status.effective
    )
    job.status.effective.preemptible = True
    return job


def test_a_job_naming_cpus_and_memory_holds_them_and_a_slot() -> None:
    cap = capacity_of([_worker("w", 4, 8 * GIB, slots=3)], [])["w"]
    big = _job(cpus=2, memory=4 * GIB)
    assert cap.fits(big)
    cap.take(big)
    assert (cap.free_slots, cap.free_millicpus, cap.free_memory) == (2, 2000, 4 * GIB)
    cap.take(_job(cpus=1.5, memory=GIB))
    assert not cap.fits(_job(cpus=1)), "half a CPU is left"
    assert cap.fits(_job(cpus=0.5, memory=3 * GIB)), "every dimension at once, to the last"
    assert not cap.fits(_job(cpus=0.5, memory=3 * GIB + 1))
    cap.take(_job())
    assert not cap.fits(_job(cpus=0.5)), "the slots are gone: naming CPUs takes a slot too"


def test_jobs_naming_neither_hold_none_so_slots_alone_bound_them() -> None:
    cap = capacity_of([_worker("w", 1, GIB, slots=8)], [_running("w", cpus=1)])["w"]
    for _ in range(7):
        job = _job()
        assert cap.fits(job)
        cap.take(job)
    assert not cap.fits(_job()), "eight slots, eight jobs"


def test_a_worker_saying_no_inventory_takes_only_jobs_naming_none() -> None:
    caps = capacity_of([_worker("old", None, None)], [])
    assert caps["old"].fits(_job()) and not caps["old"].fits(_job(memory=1))


def test_the_best_fit_is_the_worker_it_leaves_least_of() -> None:
    workers = [_worker("big", 32, 128 * GIB), _worker("small", 4, 16 * GIB)]
    caps = capacity_of(workers, [])
    assert (choice := choose_worker(_job(cpus=4, memory=16 * GIB), caps)) is not None
    assert choice.worker == "small"
    assert (choice := choose_worker(_job(cpus=8), caps)) is not None
    assert choice.worker == "big", "only it has 8"
    assert (choice := choose_worker(_job(), caps)) is not None
    assert choice.worker == "small", "naming none: the most free slots, ties by name, as before"


def test_capacity_held_for_a_nominated_job_counts_its_cpus_and_memory() -> None:
    caps = capacity_of([_worker("w", 4, 8 * GIB)], [])
    nominated = _job(cpus=3, memory=6 * GIB)
    caps["w"].reserved[nominated.id] = nominated.spec.resources
    assert not caps["w"].fits(_job(cpus=2)) and caps["w"].fits(_job(cpus=1))
    assert caps["w"].fits(nominated), "its own hold is its to take"


def test_preemption_frees_what_the_job_lacks_in_each_dimension() -> None:
    slot_only = [_running("w", 1) for _ in range(4)]
    holding = _running("w", 5, cpus=3, memory=GIB)
    bound = [*slot_only, holding]
    caps = capacity_of([_worker("w", 4, 8 * GIB, slots=8)], bound)
    plan = choose_victims(_job(cpus=2, priority=50), caps, bound, lambda j: True)
    assert plan is not None and plan.victims == [holding], "only a job holding CPUs frees CPUs"
    full = [*(_running("w", 1) for _ in range(7)), _running("w", 9, memory=7 * GIB)]
    caps = capacity_of([_worker("w", 4, 8 * GIB, slots=8)], full)
    plan = choose_victims(_job(memory=2 * GIB, priority=50), caps, full, lambda j: True)
    assert plan is not None and plan.victims == [full[-1]], (
        "the one holding memory frees the slot too"
    )


def test_pins_selectors_affinity_and_mount_roots_say_where_it_may_run() -> None:
    labels = {"gpu.model": "A100", "site": "lab2"}
    roots = ["/data", "/scratch/"]

    def why(**spec: Any) -> str | None:
        return why_not(JobSpec(command=["true"], **spec), "w1", labels, roots)

    assert why(cwd="/data/run") is None
    assert (
        why(cwd="/data2/run")
        == "cwd /data2/run is under none of its mount roots (/data, /scratch/)"
    )
    assert why(cwd="/scratch") is None and why(cwd="/data/../etc") is not None
    assert why(worker="w2") == "the job is pinned to w2"
    assert why(worker="W1") is None
    assert why(node_selector={"gpu.model": "A100"}) is None
    assert why(node_selector={"gpu.model": "H100"}) == "label gpu.model=A100, not H100"
    assert why(node_selector={"rack": "3"}) == "no label rack"
    not_in = LabelExpression(key="site", operator="NotIn", values=["lab1", "lab2"])
    assert why(node_affinity=[not_in]) == "label site is not NotIn lab1, lab2"
    absent = LabelExpression(key="rack", operator="NotIn", values=["3"])
    assert why(node_affinity=[absent]) is None, "NotIn holds where the key is absent"
    assert why(node_affinity=[LabelExpression(key="site", operator="In", values=["lab2"])]) is None
    assert why(node_affinity=[LabelExpression(key="site", operator="DoesNotExist")]) is not None
    assert under_a_root(None, roots) and under_a_root("/anything", ["/"])


def test_eligibility_is_part_of_the_fit() -> None:
    workers = [
        _worker("a", 8, 8 * GIB, labels={"site": "lab1"}),
        _worker("b", 8, 8 * GIB, labels={"site": "lab2"}, mount_roots=["/data"]),
    ]
    caps = capacity_of(workers, [])
    chosen = choose_worker(_job(node_selector={"site": "lab2"}, cwd="/data/x"), caps)
    assert chosen is not None and chosen.worker == "b"
    assert choose_worker(_job(node_selector={"site": "lab2"}, cwd="/home/x"), caps) is None
    chosen = choose_worker(_job(worker="a"), caps)
    assert chosen is not None and chosen.worker == "a"


def test_a_job_no_worker_could_ever_take_is_told_why() -> None:
    shapes = shapes_of(
        [
            _worker("a", 4, 16 * GIB, labels={"site": "lab1"}),
            _worker("b", 8, 8 * GIB, labels={"site": "lab2"}, mount_roots=["/data"]),
        ]
    )

    def said(**spec: Any) -> str | None:
        return placement_message(JobSpec(command=["true"], cwd="/data/x", **spec), shapes)

    assert said(resources=Resources(cpus=8)) is None
    assert said(resources=Resources(cpus=8, memory=16 * GIB)) == (
        "no worker has 8 CPUs and 16GiB of memory; the largest has 8 CPUs and 16GiB of memory"
    )
    assert said(resources=Resources(cpus=0.5)) is None
    assert said(resources=Resources(cpus=16)) == "no worker has 16 CPUs; the largest has 8 CPUs"
    assert said(node_selector={"site": "lab3"}) == (
        "no worker may run it (a: label site=lab1, not lab3; b: label site=lab2, not lab3)"
    )
    assert said(worker="c") == "no worker c is registered"
    home = placement_message(JobSpec(command=["true"], cwd="/home/me"), shapes)
    assert home is None, "worker a names no mount roots: any cwd"
    pinned = placement_message(JobSpec(command=["true"], cwd="/home/me", worker="b"), shapes)
    assert pinned == (
        "no worker may run it (a: the job is pinned to b; "
        "b: cwd /home/me is under none of its mount roots (/data))"
    )
    assert said(node_selector={"site": "lab2"}, resources=Resources(cpus=5)) is None
    assert said(node_selector={"site": "lab1"}, resources=Resources(cpus=5)) == (
        "no worker has 5 CPUs; the largest has 4 CPUs"
    ), "the largest among the workers it may run on"
