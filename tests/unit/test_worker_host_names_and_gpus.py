"""The worker's start-up checks of its name and GPUs (daemon/worker_host.py), as pure functions."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from jobd.api.models import GpuUsage, normalise_worker_name
from jobd.daemon.worker_host import Detected, StartupError, check_gpus, detect_gpus, parse_gpus
from jobd.wire import calls
from jobd.wire.models import Heartbeat
from jobd.worker.agent import Agent
from jobd.worker.gpus import FOREIGN_ROUNDING, foreign_use, nvml_gpus, nvml_usage
from jobd.worker.settings import WorkerSettings


@pytest.mark.parametrize(
    ("raw", "name"),
    [("GPU-Box.Lab", "gpu-box.lab"), ("node7.example.org.", "node7.example.org"), ("w1", "w1")],
)
def test_hostnames_are_lower_cased_as_node_names(raw: str, name: str) -> None:
    assert normalise_worker_name(raw) == name


@pytest.mark.parametrize("raw", ["", ".", "gpu box", "x" * 64, "box_", "b\tc", "ä"])
def test_what_is_still_no_name_is_refused_in_one_sentence(raw: str) -> None:
    with pytest.raises(ValueError, match="cannot be used: it must be 1-63 lowercase"):
        normalise_worker_name(raw)


GIB = 1 << 30


def test_gpus_parse_indices_and_an_inventory_with_memory() -> None:
    assert parse_gpus(None) is None
    assert parse_gpus("none") == {} and parse_gpus("") == {}
    assert parse_gpus("1, 0") == {0: None, 1: None}
    assert parse_gpus("0:24GiB,1:80GiB,2:40g,3:16384MiB") == {
        0: 24 * GIB,
        1: 80 * GIB,
        2: 40 * GIB,
        3: 16 * GIB,
    }


@pytest.mark.parametrize(
    "value",
    ["-1", "0,-2", "1,1", "a", "0:24GiB:x", "0;1", "0:24XB", "0:0GiB", "0:9999TiB", "1024"],
)
def test_bad_gpu_lists_are_refused(value: str) -> None:
    with pytest.raises(StartupError):
        parse_gpus(value)


def test_declared_gpus_are_checked_against_what_the_host_has() -> None:
    assert check_gpus({0: None, 1: None}, Detected({0: None, 1: None, 2: None})) == (
        {0: None, 1: None},
        None,
    )
    with pytest.raises(StartupError, match="GPU 3,9 is not on this host"):
        check_gpus({0: None, 3: None, 9: None}, Detected({0: None, 1: None}))
    # No nvidia-smi at all: nothing to check against, nothing to warn about.
    assert check_gpus({5: 24 * GIB}, Detected(None)) == ({5: 24 * GIB}, None)
    gpus, warning = check_gpus({5: None}, Detected(None, "nvidia-smi exited 9"))
    assert gpus == {5: None} and warning and "cannot check --gpus" in warning


def test_declared_memory_wins_over_detected_and_fills_in_none() -> None:
    detected = Detected({0: 24 * GIB, 1: 80 * GIB})
    assert check_gpus({0: 20 * GIB, 1: None}, detected) == ({0: 20 * GIB, 1: 80 * GIB}, None)


def test_detection_that_fails_warns_instead_of_running_silently_with_none() -> None:
    assert check_gpus(None, Detected({0: None, 1: None})) == ({0: None, 1: None}, None)
    assert check_gpus(None, Detected(None)) == ({}, None)
    gpus, warning = check_gpus(None, Detected(None, "nvidia-smi did not answer within 10 s"))
    assert gpus == {} and warning and "GPU detection failed" in warning


def test_nvidia_smi_is_asked_for_index_and_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    smi = tmp_path / "nvidia-smi"
    smi.write_text('#!/bin/sh\necho "$@" > "$0.args"\nprintf "0, 24576\\n1, [N/A]\\n"\n')
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ.get('PATH', '')}")
    assert detect_gpus() == Detected({0: 24 * GIB, 1: None})
    assert "--query-gpu=index,memory.total" in (tmp_path / "nvidia-smi.args").read_text()


def test_a_hanging_nvidia_smi_is_a_timeout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\nexec sleep 30\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ.get('PATH', '')}")
    found = detect_gpus(timeout_s=0.3)
    assert found.gpus is None and found.problem == "nvidia-smi did not answer within 0.3 s"


class _Nvml:
    """pynvml's calls the worker makes, over a table of GPUs: (total, used) bytes and the
    utilisation in percent (None: the board does not say, NVML_ERROR_NOT_SUPPORTED)."""

    def __init__(self, gpus: list[tuple[int, int]], busy: list[int | None] | None = None) -> None:
        self.gpus = gpus
        self.busy = busy or [None] * len(gpus)

    def nvmlDeviceGetCount(self) -> int:  # pynvml's names
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        if index >= len(self.gpus):
            raise RuntimeError("NVML_ERROR_INVALID_ARGUMENT")
        return index

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> SimpleNamespace:
        total, used = self.gpus[handle]
        return SimpleNamespace(total=total, used=used, free=total - used)

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> SimpleNamespace:
        percent = self.busy[handle]
        if percent is None:
            raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")
        return SimpleNamespace(gpu=percent, memory=0)


def test_nvml_gives_each_gpus_memory_and_what_is_in_use() -> None:
    nvml = _Nvml([(24 * GIB, 0), (80 * GIB, 5 * GIB + 1)], busy=[40, None])
    assert nvml_gpus(nvml) == {0: 24 * GIB, 1: 80 * GIB}
    assert nvml_usage(nvml, [0, 1, 7]) == {
        0: {"memory_used": 0, "utilization": 0.4},
        1: {"memory_used": 5 * GIB + 1},  # no utilisation said: memory still is
    }, "a GPU NVML fails on is left out"


def test_foreign_use_is_what_is_in_use_on_gpus_no_job_here_holds() -> None:
    used = {0: 3 * GIB, 1: 10 * GIB, 2: 0, 3: 1}
    assert foreign_use(used, held={1}) == {0: 3 * GIB, 3: FOREIGN_ROUNDING}


def _agent(tmp_path: Path, nvml: Any) -> Agent:
    settings = WorkerSettings(
        name="w1",
        slots=1,
        gpus=[0, 1],
        checkpoint_root=tmp_path / "ckpt",
        default_grace_s=60,
        state_dir=tmp_path / "state",
    )
    agent = Agent("http://127.0.0.1:9", None, settings)
    agent.nvml = nvml  # what load_nvml found: the stand-in, or no NVML
    return agent


def test_the_heartbeat_carries_what_nvml_reads_of_each_gpu(tmp_path: Path) -> None:
    agent = _agent(tmp_path, _Nvml([(24 * GIB, 3 * GIB), (80 * GIB, 0)], busy=[97, 0]))
    sent = calls.heartbeat("w1", agent.heartbeat_body()).content  # as the agent sends it
    assert sent is not None
    said = Heartbeat.model_validate_json(sent)  # as the broker parses it
    assert said.gpu_usage == {
        0: GpuUsage(memory_used=3 * GIB, utilization=0.97),
        1: GpuUsage(memory_used=0, utilization=0.0),
    }
    assert said.gpu_memory_foreign == {0: 3 * GIB}  # no job here holds GPU 0


def test_without_nvml_the_heartbeat_says_nothing_of_gpu_use(tmp_path: Path) -> None:
    sent = calls.heartbeat("w1", _agent(tmp_path, None).heartbeat_body()).content
    assert sent is not None
    assert b"gpu_usage" not in sent, "so a broker older than the field takes it"
