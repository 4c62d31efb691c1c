"""choose_victims: which running jobs to stop so that one queued job can run."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import count

from jobd.api.models import (
    Job,
    JobSpec,
    JobStatus,
    ObjectMeta,
    Phase,
    Resources,
    Worker,
    WorkerSpec,
)
from jobd.controllers.capacity import Capacity, capacity_of
from jobd.controllers.victims import choose_victims

T0 = datetime(2026, 1, 1, tzinfo=UTC)
_ids = count(1)


def _worker(name: str, slots: int, gpus: list[int] | None = None) -> Worker:
    return Worker(metadata=ObjectMeta(name=name), spec=WorkerSpec(slots=slots, gpus=gpus or []))


def _job(priority: int, gpus: int = 0) -> Job:
    job = Job(
        metadata=ObjectMeta(id=next(_ids), name="j"),
        spec=JobSpec(command=["true"], resources=Resources(gpus=gpus)),
    )
    job.status.effective.priority = priority
    return job


def _running(
    worker: str, priority: int, started_min: float = 0, gpus: list[int] | None = None
) -> Job:
    job = _job(priority, gpus=len(gpus or []))
    job.status = JobStatus(
        phase=Phase.RUNNING,
        worker=worker,
        gpus=gpus or [],
        started_at=T0 + timedelta(minutes=started_min),
        effective=job.status.effective,
    )
    return job


def _caps(workers: list[Worker], bound: list[Job]) -> dict[str, Capacity]:
    return capacity_of(workers, bound)


def _any(job: Job) -> bool:
    return job.status.phase == Phase.RUNNING


def _ids_of(jobs: list[Job]) -> list[int]:
    return [j.id for j in jobs]


def test_lowest_priority_goes_first() -> None:
    bound = [_running("w", 5), _running("w", 1), _running("w", 3)]
    plan = choose_victims(_job(10), _caps([_worker("w", 3)], bound), bound, _any)
    assert plan is not None
    assert plan.worker == "w"
    assert _ids_of(plan.victims) == [bound[1].id]


def test_within_a_priority_the_most_recently_started_goes_first() -> None:
    bound = [_running("w", 1, started_min=0), _running("w", 1, started_min=30)]
    plan = choose_victims(_job(10), _caps([_worker("w", 2)], bound), bound, _any)
    assert plan is not None
    assert _ids_of(plan.victims) == [bound[1].id], "least work lost"


def test_no_more_victims_than_needed() -> None:
    bound = [_running("w", 1), _running("w", 2), _running("w", 3), _running("w", 4)]
    candidate = _job(10, gpus=0)
    plan = choose_victims(candidate, _caps([_worker("w", 4)], bound), bound, _any)
    assert plan is not None and len(plan.victims) == 1

    two_slots = _job(10)
    two_slots.spec.resources = Resources(gpus=2)
    gpu_bound = [_running("g", p, gpus=[p - 1]) for p in (1, 2, 3, 4)]
    plan = choose_victims(
        two_slots, _caps([_worker("g", 4, [0, 1, 2, 3])], gpu_bound), gpu_bound, _any
    )
    assert plan is not None
    assert _ids_of(plan.victims) == [gpu_bound[0].id, gpu_bound[1].id]


def test_free_room_means_no_victims() -> None:
    bound = [_running("w", 1)]
    plan = choose_victims(_job(10), _caps([_worker("w", 2)], bound), bound, _any)
    assert plan is not None and plan.victims == []


def test_jobs_already_being_preempted_count_as_capacity_on_its_way() -> None:
    leaving = _running("w", 1)
    leaving.status.phase = Phase.PREEMPTING
    leaving.status.desired_phase = Phase.PREEMPTED
    staying = _running("w", 2)
    bound = [leaving, staying]
    plan = choose_victims(_job(10), _caps([_worker("w", 2)], bound), bound, _any)
    assert plan is not None
    assert plan.victims == [], "the slot of the job already leaving is enough"


def test_a_job_told_to_stop_but_still_running_is_also_on_its_way() -> None:
    told = _running("w", 1)
    told.status.desired_phase = Phase.PREEMPTED  # the worker has not reported stopping yet
    bound = [told, _running("w", 2)]
    plan = choose_victims(_job(10), _caps([_worker("w", 2)], bound), bound, _any)
    assert plan is not None and plan.victims == []


def test_a_job_timing_out_is_on_its_way_and_never_a_victim() -> None:
    timing_out = _running("w", 1)
    timing_out.status.desired_phase = Phase.FAILED  # a hang guard ran out: SIGTERM sent
    bound = [timing_out, _running("w", 2)]
    plan = choose_victims(_job(10), _caps([_worker("w", 2)], bound), bound, _any)
    assert plan is not None and plan.victims == []


def test_the_candidate_must_fit_on_one_worker() -> None:
    # Each worker can free one slot; the candidate needs two. Two halves make no whole.
    bound = [_running("a", 1, gpus=[0]), _running("a", 9, gpus=[1])]
    bound += [_running("b", 1, gpus=[0]), _running("b", 9, gpus=[1])]
    workers = [_worker("a", 2, [0, 1]), _worker("b", 2, [0, 1])]
    candidate = _job(5, gpus=2)  # may only displace the priority-1 jobs
    low = lambda j: j.status.effective.priority < 5  # noqa: E731
    assert choose_victims(candidate, _caps(workers, bound), bound, low) is None


def test_the_worker_needing_fewest_victims_wins() -> None:
    bound = [_running("a", 1), _running("a", 1), _running("b", 2)]
    workers = [_worker("a", 2), _worker("b", 1)]
    candidate = _job(10)
    candidate.spec.resources = Resources(gpus=0)
    plan = choose_victims(candidate, _caps(workers, bound), bound, _any)
    assert plan is not None and len(plan.victims) == 1
    # Equal counts: the plan whose victims have the lowest priority.
    assert plan.worker == "a"


def test_gpu_requests_are_respected() -> None:
    # Slots are free, GPUs are not: a CPU job must not be preempted for a GPU job.
    cpu_job = _running("w", 1)
    gpu_job = _running("w", 5, gpus=[0])
    bound = [cpu_job, gpu_job]
    plan = choose_victims(_job(10, gpus=1), _caps([_worker("w", 3, [0])], bound), bound, _any)
    assert plan is not None
    assert _ids_of(plan.victims) == [gpu_job.id]


def test_only_the_victims_a_gpu_candidate_needs_are_chosen() -> None:
    # The lowest-priority job holds no GPU; stopping it frees a slot but not the GPU.
    cpu_job = _running("w", 1)
    gpu_job = _running("w", 5, gpus=[0])
    bound = [cpu_job, gpu_job]
    plan = choose_victims(_job(10, gpus=1), _caps([_worker("w", 2, [0])], bound), bound, _any)
    assert plan is not None
    assert _ids_of(plan.victims) == [gpu_job.id]


def test_none_when_no_eligible_victims_make_room() -> None:
    bound = [_running("w", 20), _running("w", 30)]
    caps = _caps([_worker("w", 2)], bound)
    assert choose_victims(_job(10), caps, bound, lambda j: j.status.effective.priority < 10) is None


def test_none_when_the_candidate_is_bigger_than_any_worker() -> None:
    bound = [_running("w", 1)]
    assert (
        choose_victims(_job(10, gpus=2), _caps([_worker("w", 1, [0])], bound), bound, _any) is None
    )


def test_capacity_held_for_another_nominated_job_is_not_counted() -> None:
    bound = [_running("w", 1)]
    caps = _caps([_worker("w", 2)], bound)
    other = _job(50)
    caps["w"].reserved[other.id] = Resources()  # the free slot is promised to `other`
    plan = choose_victims(_job(10), caps, bound, _any)
    assert plan is not None
    assert _ids_of(plan.victims) == [bound[0].id]


def test_lost_workers_offer_no_room() -> None:
    lost = _worker("w", 1)
    lost.status.phase = "Lost"
    bound = [_running("w", 1)]
    assert choose_victims(_job(10), _caps([lost], bound), bound, _any) is None
