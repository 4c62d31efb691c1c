"""The capacity model's two pools and GPU memory: CPU jobs take slots, GPU jobs take GPUs
(best fit by memory, foreign use counted), and preemption frees the pool a job lacks."""

from __future__ import annotations

from datetime import UTC, datetime
from itertools import count

import pytest
from pydantic import ValidationError

from jobd.api.models import (
    ADMISSION,
    Job,
    JobSpec,
    JobStatus,
    ObjectMeta,
    Phase,
    Resources,
    Worker,
    WorkerSpec,
)
from jobd.api.sizes import format_size, parse_size
from jobd.controllers.capacity import capacity_of, choose_worker
from jobd.controllers.victims import choose_victims

GIB = 1 << 30
T0 = datetime(2026, 1, 1, tzinfo=UTC)
_ids = count(1)


def _worker(
    name: str, slots: int, memory: dict[int, int], foreign: dict[int, int] | None = None
) -> Worker:
    spec = WorkerSpec(
        slots=slots, gpus=sorted(memory), gpu_memory={g: m for g, m in memory.items() if m}
    )
    worker = Worker(metadata=ObjectMeta(name=name), spec=spec)
    worker.status.gpu_memory_foreign = foreign or {}
    return worker


def _job(gpus: int = 0, memory: int | None = None, priority: int = 10) -> Job:
    job = Job(
        metadata=ObjectMeta(id=next(_ids), name="j"),
        spec=JobSpec(command=["true"], resources=Resources(gpus=gpus, gpu_memory=memory)),
    )
    job.status.effective.priority = priority
    return job


def _running(worker: str, priority: int, gpus: list[int] | None = None) -> Job:
    job = _job(gpus=len(gpus or []), priority=priority)
    job.status = JobStatus(
        phase=Phase.RUNNING,
        worker=worker,
        gpus=gpus or [],
        started_at=T0,
        effective=job.status.effective,
    )
    job.status.effective.preemptible = True
    return job


def _four_gpus() -> Worker:
    return _worker("w", 4, {0: 0, 1: 0, 2: 0, 3: 0})


def test_cpu_jobs_filling_the_slots_leave_the_gpus_to_gpu_jobs() -> None:
    cpu_jobs = [_running("w", 1) for _ in range(4)]
    cap = capacity_of([_four_gpus()], cpu_jobs)["w"]
    assert not cap.fits(_job()), "the four slots are taken"
    assert cap.take(_job(gpus=1)) == [0]
    assert cap.take(_job(gpus=3)) == [1, 2, 3]


def test_gpu_jobs_take_no_slot() -> None:
    gpu_jobs = [_running("w", 1, gpus=[g]) for g in range(4)]
    cap = capacity_of([_four_gpus()], gpu_jobs)["w"]
    assert not cap.fits(_job(gpus=1))
    assert all(cap.take(_job()) == [] for _ in range(4))
    assert not cap.fits(_job())


def test_a_job_gets_the_smallest_gpus_whose_memory_fits() -> None:
    cap = capacity_of([_worker("w", 2, {0: 24 * GIB, 1: 80 * GIB})], [])["w"]
    assert cap.pick(_job(gpus=1, memory=40 * GIB)) == [1]
    assert cap.pick(_job(gpus=1, memory=16 * GIB)) == [0]
    assert cap.pick(_job(gpus=1)) == [0], "no memory asked: the small one, the big stays free"
    assert cap.pick(_job(gpus=1, memory=100 * GIB)) is None
    assert cap.pick(_job(gpus=2, memory=40 * GIB)) is None


def test_gpus_of_unknown_memory_take_only_jobs_that_ask_none() -> None:
    cap = capacity_of([_worker("w", 1, {0: 0})], [])["w"]
    assert cap.pick(_job(gpus=1)) == [0]
    assert cap.pick(_job(gpus=1, memory=GIB)) is None


def test_memory_foreign_processes_use_is_counted_as_taken() -> None:
    worker = _worker("w", 2, {0: 80 * GIB, 1: 80 * GIB}, foreign={0: 60 * GIB})
    cap = capacity_of([worker], [])["w"]
    assert cap.pick(_job(gpus=1, memory=40 * GIB)) == [1]
    assert cap.pick(_job(gpus=1, memory=16 * GIB)) == [0], "20GiB is left on GPU 0: best fit"


def test_the_worker_whose_gpus_fit_best_is_chosen() -> None:
    workers = [_worker("big", 1, {0: 80 * GIB}), _worker("small", 1, {0: 48 * GIB})]
    caps = capacity_of(workers, [])
    assert (choice := choose_worker(_job(gpus=1, memory=40 * GIB), caps)) is not None
    assert choice.worker == "small"
    assert (choice := choose_worker(_job(gpus=1, memory=60 * GIB), caps)) is not None
    assert choice.worker == "big"


def test_a_hold_for_a_nominated_job_keeps_the_gpu_that_fits_it() -> None:
    cap = capacity_of([_worker("w", 2, {0: 24 * GIB, 1: 80 * GIB})], [])["w"]
    nominated = _job(gpus=1, memory=40 * GIB)
    cap.reserved[nominated.id] = nominated.spec.resources
    assert not cap.fits(_job(gpus=1, memory=40 * GIB)), "GPU 1 is held"
    assert cap.pick(_job(gpus=1, memory=16 * GIB)) == [0]
    assert cap.pick(nominated) == [1]


def test_a_gpu_job_preempts_gpu_jobs_only() -> None:
    cpu = [_running("w", 1) for _ in range(4)]
    gpu = [_running("w", 5, gpus=[g]) for g in range(4)]
    bound = cpu + gpu
    plan = choose_victims(_job(gpus=1), capacity_of([_four_gpus()], bound), bound, lambda j: True)
    assert plan is not None and [v.id for v in plan.victims] == [gpu[0].id]


def test_a_cpu_job_preempts_cpu_jobs_only() -> None:
    cpu = [_running("w", 5) for _ in range(4)]
    gpu = [_running("w", 1, gpus=[g]) for g in range(4)]
    bound = cpu + gpu
    plan = choose_victims(_job(), capacity_of([_four_gpus()], bound), bound, lambda j: True)
    assert plan is not None and [v.id for v in plan.victims] == [cpu[0].id]
    only_gpu_victims = [*cpu, *gpu]
    eligible = lambda j: bool(j.status.gpus)  # noqa: E731
    caps = capacity_of([_four_gpus()], only_gpu_victims)
    assert choose_victims(_job(), caps, only_gpu_victims, eligible) is None


def test_a_victim_is_chosen_on_a_gpu_big_enough() -> None:
    bound = [_running("w", 1, gpus=[0]), _running("w", 2, gpus=[1])]
    caps = capacity_of([_worker("w", 2, {0: 24 * GIB, 1: 80 * GIB})], bound)
    plan = choose_victims(_job(gpus=1, memory=40 * GIB), caps, bound, lambda j: True)
    assert plan is not None and [v.id for v in plan.victims] == [bound[1].id]


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("24GiB", 24 * GIB),
        ("80G", 80 * GIB),
        ("40960MiB", 40 * GIB),
        ("1.5g", 3 * GIB // 2),
        ("512", 512),
    ],
)
def test_sizes_read_in_binary_units(text: str, size: int) -> None:
    assert parse_size(text) == size
    assert parse_size(format_size(size)) == size


@pytest.mark.parametrize("text", ["", "GiB", "-1GiB", "0", "24 XB", "1e3", "2PiB"])
def test_what_is_no_size_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_size(text)


def test_a_job_document_takes_a_size_and_refuses_memory_without_gpus() -> None:
    spec = JobSpec.model_validate(
        {"command": ["x"], "resources": {"gpus": 1, "gpu_memory": "40GiB"}}, context=ADMISSION
    )
    assert spec.resources.gpu_memory == 40 * GIB
    with pytest.raises(ValidationError, match="ask for gpus as well"):
        Resources.model_validate({"gpu_memory": "40GiB"})
    with pytest.raises(ValidationError, match="not a size"):
        Resources.model_validate({"gpus": 1, "gpu_memory": "lots"})
    # Memory of a GPU the worker does not hand out is dropped (no schema could refuse it).
    listed = WorkerSpec.model_validate(
        {"gpus": [0], "gpu_memory": {"0": GIB, "1": GIB}}, context=ADMISSION
    )
    assert listed.gpu_memory == {0: GIB}


def test_the_openapi_schema_allows_only_what_admission_takes() -> None:
    """The fuzzer sends what the schema allows; none of it may be refused for a size."""
    import re

    from jobd.api.sizes import SIZE_PATTERN

    for allowed in ("1", "40GiB", "80G", "40960MiB", "999.9T", "999999999999999", "1 KB"):
        assert re.match(SIZE_PATTERN, allowed)
        parse_size(allowed)
    for refused in ("0", "0.5G", "1000T", "9999999999999999", "01G"):
        assert not re.match(SIZE_PATTERN, refused)
    schema = Resources.model_json_schema()
    assert {"properties": {"gpus": {"minimum": 1}}, "required": ["gpus"]} in schema["anyOf"]


def test_a_size_too_large_for_any_number_is_an_error_not_a_crash() -> None:
    with pytest.raises(ValueError, match="at most 1024TiB"):
        parse_size("9" * 400 + "GiB")
