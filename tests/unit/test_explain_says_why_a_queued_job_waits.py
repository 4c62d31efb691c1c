"""`job explain`'s judgement (controllers/explain.py), one reason at a time: what keeps a
queued job from each worker (not heard, Lost, cordoned, a label, mount roots, a pin, too
small, short now by how much in each dimension, GPU memory other programs hold, room held
for a nominated job), its place in the queue, its parents, its backoff, its array's cap,
and the victims `preempt-blockers --dry-run` would take."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import count
from typing import Any

from jobd.api.models import (
    ArrayRef,
    Job,
    JobSpec,
    JobStatus,
    ObjectMeta,
    Phase,
    Resources,
    Worker,
    WorkerPhase,
    WorkerSpec,
    WorkerStatus,
)
from jobd.controllers.explain import Cluster, Queue, explain

GIB = 1 << 30
T0 = datetime(2026, 1, 1, tzinfo=UTC)
_ids = count(100)


def _worker(name: str, cpus: float = 8, memory: int = 16 * GIB, **spec: Any) -> Worker:
    return Worker(
        metadata=ObjectMeta(name=name),
        spec=WorkerSpec(slots=spec.pop("slots", 4), cpus=cpus, memory=memory, **spec),
    )


def _job(priority: int = 10, **resources: Any) -> Job:
    spec_fields = {
        k: resources.pop(k) for k in ("worker", "node_selector", "cwd") if k in resources
    }
    job = Job(
        metadata=ObjectMeta(id=next(_ids), name="j"),
        spec=JobSpec(command=["true"], resources=Resources(**resources), **spec_fields),
    )
    job.status.effective.priority = priority
    return job


def _running(worker: str, priority: int = 1, **resources: Any) -> Job:
    job = _job(priority=priority, **resources)
    job.status = JobStatus(
        phase=Phase.RUNNING, worker=worker, started_at=T0, effective=job.status.effective
    )
    job.status.effective.preemptible = True
    return job


def _explain(job: Job, workers: list[Worker], bound: tuple[Job, ...] = (), **queue: Any) -> Any:
    heard = {w.name for w in workers}
    return explain(job, Cluster(workers, heard, list(bound)), Queue(now=T0, **queue))


def _says(answer: Any, worker: str) -> list[str]:
    found: list[str] = next(w for w in answer["workers"] if w["worker"] == worker)["says"]
    return found


def test_each_worker_says_what_it_lacks_and_by_how_much() -> None:
    small, big = _worker("small", cpus=2, memory=4 * GIB), _worker("big")
    hog = _running("big", cpus=6, memory=14 * GIB)
    job = _job(cpus=4, memory=8 * GIB)
    answer = _explain(job, [small, big], (hog,))
    assert answer["reason"] == "WaitingForCapacity"
    assert _says(answer, "small") == [
        "too small even when empty: cpus (needs 4, has 2)",
        "too small even when empty: memory (needs 8GiB, has 4GiB)",
    ]
    assert _says(answer, "big") == [
        "short of cpus by 2 (needs 4, 2 free of 8)",
        "short of memory by 6GiB (needs 8GiB, 2GiB free of 16GiB)",
    ]
    short = {s["resource"]: s for s in answer["workers"][1]["short"]}
    assert (short["cpus"]["need"], short["cpus"]["free"], short["cpus"]["short_by"]) == (4, 2, 2)
    assert answer["fits"] == []
    assert answer["preemption"]["possible"] is True
    assert answer["preemption"]["victims"] == [{"job": hog.id, "name": hog.ref, "priority": 1}]
    assert answer["preemption"]["worker"] == "big"


def test_a_job_that_fits_says_where_and_needs_no_preemption() -> None:
    answer = _explain(_job(cpus=1), [_worker("a")], ahead=3, ahead_higher=1)
    assert answer["fits"] == ["a"] and _says(answer, "a") == ["fits now"]
    assert "bound at the scheduler's next pass; 3 jobs ahead of it" in answer["message"]
    assert answer["queue"]["ahead"] == 3 and answer["queue"]["position"] == 4
    assert "1 of higher priority, 2 of priority 10 queued before it" in answer["queue"]["says"]
    assert answer["preemption"] == {"possible": False, "says": "no preemption needed: it fits now"}


def test_slots_and_gpus_are_counted_too() -> None:
    full = _worker("cpu", slots=1)
    gpus = _worker("gpu", gpus=[0, 1], gpu_memory={0: 80 * GIB, 1: 80 * GIB})
    taken = _running("gpu", gpus=1)
    taken.status.gpus = [0]
    answer = _explain(_job(gpus=2), [full, gpus], (_running("cpu"), taken))
    assert _says(answer, "cpu") == ["too small even when empty: gpus (needs 2, has 0)"]
    assert _says(answer, "gpu") == ["short of gpus by 1 (needs 2, 1 free of 2)"]
    cpu_job = _explain(_job(), [full], (_running("cpu", priority=50),))
    assert _says(cpu_job, "cpu") == ["short of slots by 1 (needs 1, 0 free of 1)"]
    assert cpu_job["preemption"]["possible"] is False
    assert "priority below 10" in cpu_job["preemption"]["says"]


def test_gpu_memory_other_programs_hold_is_named() -> None:
    box = _worker("box", gpus=[0], gpu_memory={0: 80 * GIB})
    box.status = WorkerStatus(gpu_memory_foreign={0: 50 * GIB})
    answer = _explain(_job(gpus=1, gpu_memory=40 * GIB), [box])
    assert _says(answer, "box") == [
        "short of gpu_memory by 10GiB on a GPU (needs 40GiB on each of 1 GPU free; the best "
        "free GPUs have 30GiB; the largest has 80GiB)",
        "GPU 0: 50GiB of 80GiB taken by programs jobd did not start",
    ]
    assert answer["reason"] == "WaitingForCapacity", "it fits the GPU once the programs end"


def test_workers_out_of_play_say_why() -> None:
    lost = _worker("lost")
    lost.status = WorkerStatus(phase=WorkerPhase.LOST)
    cordoned = _worker("cordoned", cordoned=True)
    unheard = _worker("unheard")
    job = _job(cpus=1)
    heard = {"lost", "cordoned"}
    answer = explain(job, Cluster([lost, cordoned, unheard], heard, []), Queue())
    assert _says(answer, "lost") == ["Lost: its lease ran out"]
    assert _says(answer, "cordoned") == ["cordoned: no new job is placed there"]
    assert _says(answer, "unheard")[0].startswith("not heard from since the broker started")
    assert answer["reason"] == "WaitingForCapacity" and answer["fits"] == []
    assert answer["message"] == "no worker it may use has the room free now"


def test_labels_pins_and_mount_roots_are_named() -> None:
    lab1 = _worker("lab1", labels={"site": "lab1"}, mount_roots=["/data"])
    lab2 = _worker("lab2", labels={"site": "lab2"})
    wrong_site = _explain(_job(node_selector={"site": "lab2"}, cwd="/data/x"), [lab1, lab2])
    assert _says(wrong_site, "lab1") == ["label site=lab1, not lab2"]
    assert wrong_site["fits"] == ["lab2"]
    pinned = _explain(_job(worker="lab2", cwd="/home/me"), [lab1, lab2])
    assert _says(pinned, "lab1") == ["the job is pinned to lab2"]
    rooted = _explain(_job(cwd="/home/me"), [lab1])
    assert _says(rooted, "lab1") == ["cwd /home/me is under none of its mount roots (/data)"]
    assert rooted["reason"] == "Unschedulable"
    assert rooted["message"].startswith("no worker may run it (lab1: cwd /home/me")


def test_a_job_no_worker_could_hold_is_unschedulable() -> None:
    answer = _explain(_job(cpus=16), [_worker("a")])
    assert answer["reason"] == "Unschedulable"
    assert answer["message"] == "no worker has 16 CPUs; the largest has 8 CPUs"
    assert answer["preemption"]["possible"] is False


def test_room_held_for_a_nominated_job_is_said() -> None:
    job, other = _job(cpus=4), _job(cpus=4)
    other.status.nominated_worker = "a"
    workers = [_worker("a", cpus=4)]
    answer = explain(job, Cluster(workers, {"a"}, [], [other]), Queue())
    assert _says(answer, "a") == [
        "short of cpus by 4 (needs 4, 0 free of 4)",
        f"the free room is held for job {other.id} (preemption freed it)",
    ]


def test_dependencies_backoff_and_array_cap() -> None:
    parent = _running("a")
    child = _job()
    child.status.dependencies_met, child.status.parents = False, [parent.id, 999]
    answer = _explain(child, [_worker("a")], parents=[(parent.id, parent), (999, None)])
    assert answer["reason"] == "WaitingForDependencies"
    assert answer["message"] == f"it waits for job {parent.id}, 999"
    assert [d["phase"] for d in answer["dependencies"]] == ["Running", None]
    assert answer["dependencies"][1]["says"] == "job 999 is gone"
    assert answer["queue"] is None

    retried = _job()
    retried.status.retry_at, retried.status.retries = T0 + timedelta(seconds=30), 1
    answer = _explain(retried, [_worker("a")])
    assert answer["reason"] == "RetryBackoff"
    assert answer["retry"]["in_s"] == 30
    assert "no preemption" not in answer["preemption"]["says"]
    assert "waits out its retry backoff" in answer["preemption"]["says"]

    member = _job()
    member.metadata.array = ArrayRef(id=3, name="sweep", index=5, parallelism=2)
    answer = _explain(member, [_worker("a")], array_bound=2)
    assert answer["reason"] == "ArrayParallelism"
    assert answer["array"]["capped"] is True
    assert answer["array"]["says"] == "array A3 sweep: 2 of at most 2 members bound (its cap)"


def test_a_job_that_is_not_pending_says_its_phase() -> None:
    running = _running("a")
    running.status.attempt = 2
    assert _explain(running, [_worker("a")]) == {
        "job": running.id,
        "name": running.ref,
        "phase": "Running",
        "summary": f"job {running.id} is Running on a (attempt 2)",
    }
    ended = _job()
    ended.status.phase, ended.status.reason, ended.status.exit_code = Phase.FAILED, "Error", 3
    assert _explain(ended, [])["summary"] == f"job {ended.id} has ended Failed (Error)"


def test_a_worker_whose_host_lacks_the_owner_says_so() -> None:
    here, there = _worker("here"), _worker("there")
    here.status.users, there.status.users = ["alice", "bob"], ["bob"]
    job = _job(cpus=1)
    job.metadata.owner = "alice"
    answer = _explain(job, [here, there])
    assert _says(answer, "there") == ["user alice does not exist on this host"]
    assert _says(answer, "here") == ["fits now"]
