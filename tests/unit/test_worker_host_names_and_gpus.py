"""The worker's start-up checks of its name and GPUs (cli/worker_host.py), as pure functions."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from jobd.api.models import normalise_worker_name
from jobd.cli.worker_host import Detected, StartupError, check_gpus, detect_gpus, parse_gpus


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


def test_gpus_parse_indices_and_an_inventory_with_memory() -> None:
    assert parse_gpus(None) is None
    assert parse_gpus("none") == [] and parse_gpus("") == []
    assert parse_gpus("1, 0") == [0, 1]
    assert parse_gpus("0:24GiB,1:80GiB,2:40g,3:16") == [0, 1, 2, 3]


@pytest.mark.parametrize("value", ["-1", "0,-2", "1,1", "a", "0:24GiB:x", "0;1"])
def test_bad_gpu_lists_are_refused(value: str) -> None:
    with pytest.raises(StartupError):
        parse_gpus(value)


def test_declared_gpus_are_checked_against_what_nvidia_smi_lists() -> None:
    assert check_gpus([0, 1], Detected([0, 1, 2])) == ([0, 1], None)
    with pytest.raises(StartupError, match="GPU 3,9 is not on this host"):
        check_gpus([0, 3, 9], Detected([0, 1]))
    # No nvidia-smi at all: nothing to check against, nothing to warn about.
    assert check_gpus([5], Detected(None)) == ([5], None)
    gpus, warning = check_gpus([5], Detected(None, "nvidia-smi exited 9"))
    assert gpus == [5] and warning and "cannot check --gpus" in warning


def test_detection_that_fails_warns_instead_of_running_silently_with_none() -> None:
    assert check_gpus(None, Detected([0, 1])) == ([0, 1], None)
    assert check_gpus(None, Detected(None)) == ([], None)
    gpus, warning = check_gpus(None, Detected(None, "nvidia-smi did not answer within 10 s"))
    assert gpus == [] and warning and "GPU detection failed" in warning


def test_a_hanging_nvidia_smi_is_a_timeout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\nexec sleep 30\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ.get('PATH', '')}")
    found = detect_gpus(timeout_s=0.3)
    assert found.indices is None and found.problem == "nvidia-smi did not answer within 0.3 s"
