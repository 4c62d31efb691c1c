"""A worker's inventory and labels (issue 23): detected (the CPUs this process may run
on, MemTotal) less a reserve that never takes it below 0, or declared as said; labels
detected Kubernetes-style and declared over them; bad settings stop the start."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from jobd.daemon.inventory import (
    DEFAULT_RESERVE_CPUS,
    DEFAULT_RESERVE_MEMORY,
    detected_cpus,
    detected_labels,
    detected_memory,
    gpu_model_label,
    labels_of,
    mount_roots_of,
    offered,
    parse_labels,
    size_option,
)
from jobd.daemon.worker_host import StartupError

GIB = 1 << 30


def test_the_cpus_are_those_this_process_may_run_on() -> None:
    assert detected_cpus() == len(os.sched_getaffinity(0))


def test_the_memory_is_memtotal(tmp_path: Path) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       16318412 kB\nMemFree:         1000 kB\n")
    assert detected_memory(meminfo) == 16318412 * 1024
    meminfo.write_text("nothing here\n")
    assert detected_memory(meminfo) is None
    assert detected_memory(tmp_path / "absent") is None
    real = detected_memory()
    assert real is not None and real > 64 << 20, "this host's /proc/meminfo"


def test_the_reserve_comes_off_what_is_detected_never_below_zero() -> None:
    assert (DEFAULT_RESERVE_CPUS, DEFAULT_RESERVE_MEMORY) == (1.0, 2 * GIB)
    assert offered(None, 8, DEFAULT_RESERVE_CPUS) == 7
    assert offered(None, 1, DEFAULT_RESERVE_CPUS) == 0, "never below 0"
    assert offered(None, 64 * GIB, 2 * GIB) == 62 * GIB
    assert offered(3.5, 8, 1) == 3.5, "declared: taken as said, no reserve"
    assert offered(0, 8, 1) == 0
    assert offered(None, None, 1) is None


def test_sizes_read_as_written() -> None:
    assert size_option("64GiB") == 64 * GIB and size_option(None) is None
    with pytest.raises(StartupError, match="not a size"):
        size_option("lots")


def test_labels_are_detected_then_declared_over() -> None:
    assert detected_labels("x86_64", "Linux") == {"arch": "amd64", "os": "linux"}
    assert detected_labels("aarch64", "Linux")["arch"] == "arm64"
    assert detected_labels("mips", "Linux")["arch"] == "mips"
    labels = labels_of((("gpu", "a100"), ("os", "custom")), [])
    assert labels["gpu"] == "a100" and labels["os"] == "custom" and "arch" in labels
    assert "gpu.model" not in labels, "no GPU handed out, no model"


def test_a_gpu_name_becomes_a_label_value() -> None:
    assert gpu_model_label("NVIDIA A100-SXM4-80GB") == "A100-SXM4-80GB"
    assert gpu_model_label("NVIDIA GeForce RTX 4090") == "GeForce-RTX-4090"
    assert gpu_model_label("Tesla V100-PCIE-16GB ") == "Tesla-V100-PCIE-16GB"
    assert gpu_model_label("   ") is None


def test_declared_labels_are_checked_at_start() -> None:
    assert parse_labels(["gpu=a100", "site=lab2,rack=3 row=a"]) == (
        ("gpu", "a100"),
        ("site", "lab2"),
        ("rack", "3"),
        ("row", "a"),
    )
    for bad in ("gpu", "=a100", "gpu=a 100", "gpu=a\x00", "a=b=c"):
        with pytest.raises(StartupError, match="--label"):
            parse_labels([bad])


def test_mount_roots_are_absolute_and_normalised(tmp_path: Path) -> None:
    assert mount_roots_of([Path("/data/"), Path("/data"), Path("/scratch/../srv")]) == [
        "/data",
        "/srv",
    ]
    with pytest.raises(StartupError, match="absolute"):
        mount_roots_of([Path("data")])
