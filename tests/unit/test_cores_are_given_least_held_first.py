"""Which cores a job naming cpus is pinned to (jobd.worker.limits.CoreAllocator): ceil(N)
cores, those the running jobs hold least; fractions share a core while they fit in it;
a job's cores are free again once it is released. And what the shim refuses to apply."""

from __future__ import annotations

import pytest

from jobd.worker.limits import CoreAllocator, pinnable_cores, thread_count
from jobd.worker.shim.limits import CGROUP_V1, RSS_WATCH, Limits, human_size


def test_whole_cpus_get_cores_of_their_own_while_there_are_free_ones() -> None:
    cores = CoreAllocator((2, 3, 4, 5))

    assert cores.take(1, 2) == [2, 3]
    assert cores.take(2, 1.5) == [4, 5]  # ceil: 1.5 CPUs are pinned to two cores
    cores.release(1)
    assert cores.take(3, 1) == [2]


def test_once_every_core_is_held_the_least_held_are_shared() -> None:
    cores = CoreAllocator((0, 1))
    cores.take(1, 2)  # 1 on each
    cores.take(2, 1)  # core 0 now holds 2

    assert cores.take(3, 1) == [1]
    assert cores.take(4, 8) == [0, 1]  # more than the worker has: all of them


def test_fractions_share_one_core_while_they_fit_in_it() -> None:
    cores = CoreAllocator((0, 1, 2))
    cores.take(1, 1)  # core 0

    assert cores.take(2, 0.5) == [1]
    assert cores.take(3, 0.25) == [1]  # packed with the other fraction
    assert cores.take(4, 0.5) == [2]  # 0.75 + 0.5 would not fit in core 1
    assert cores.take(5, 0.25) == [1]  # core 1 is now full, core 2 at 0.5


def test_a_readopted_job_holds_the_cores_its_workload_has() -> None:
    cores = CoreAllocator((0, 1, 2, 3))
    cores.hold(7, [0, 1])

    assert cores.take(8, 2) == [2, 3]


def test_taking_again_for_the_same_job_replaces_what_it_held() -> None:
    cores = CoreAllocator((0, 1))
    cores.take(1, 1)
    cores.take(1, 1)

    assert cores.take(2, 1) == [1]


def test_thread_count_is_the_ceiling_and_at_least_one() -> None:
    assert [thread_count(c) for c in (0.001, 0.5, 1, 1.5, 4)] == [1, 1, 1, 2, 4]


def test_the_reserve_keeps_the_first_cores_for_the_host_when_detected() -> None:
    every = pinnable_cores(declared_cpus=True, reserve_cpus=1)
    kept = pinnable_cores(declared_cpus=False, reserve_cpus=1)

    assert kept == (every[1:] or every)


@pytest.mark.parametrize(
    ("data", "names"),
    [
        ("4 cores", "must be an object"),
        ({"cpus": [], "memory_via": RSS_WATCH}, "limits.cpus"),
        ({"cpus": [-1], "memory_via": RSS_WATCH}, "limits.cpus"),
        ({"cpus": [True], "memory_via": RSS_WATCH}, "limits.cpus"),
        ({"memory": 0, "memory_via": RSS_WATCH}, "limits.memory"),
        ({"memory": "1GiB", "memory_via": RSS_WATCH}, "limits.memory"),
        ({"memory": 1, "memory_via": "cgroup-v3"}, "limits.memory_via"),
        ({"memory": 1, "memory_via": CGROUP_V1}, "cgroup_root"),
    ],
)
def test_limits_no_shim_can_apply_are_refused_naming_the_field(data: object, names: str) -> None:
    with pytest.raises(ValueError, match=names):
        Limits.from_dict(data)


def test_limits_read_back_as_written() -> None:
    limits = Limits([1, 3], 1 << 30, CGROUP_V1, "/sys/fs/cgroup/memory", "/jobd-w1")

    assert Limits.from_dict(limits.to_dict()) == limits
    assert Limits.from_dict(None) is None


def test_sizes_in_messages_read_as_jobd_reads_them() -> None:
    sizes = [512, 100 << 20, 1536 << 20, 3 << 40]

    assert [human_size(s) for s in sizes] == ["512B", "100MiB", "1.5GiB", "3TiB"]
