"""What `jobd worker` and `jobd dev` refuse at start, as a user meets it: one sentence, exit 1.

An unusable worker name, a negative GPU index, an index `nvidia-smi` does not list. A
fake `nvidia-smi` on PATH stands in for the driver (the OS boundary, not part of jobd);
one that fails makes a logged warning, not a silent worker with no GPUs.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.e2e.harness import BIN, start_jobd, stop_jobd

LISTS_TWO = "#!/bin/sh\nprintf '0\\n1\\n'\n"
FAILS = "#!/bin/sh\necho 'NVIDIA-SMI has failed because it could not communicate' >&2\nexit 9\n"


def _fake_smi(root: Path, script: str) -> dict[str, str]:
    """An environment whose PATH finds this `nvidia-smi` first."""
    bin_dir = root / "fakebin"
    bin_dir.mkdir(exist_ok=True)
    smi = bin_dir / "nvidia-smi"
    smi.write_text(script)
    smi.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBD_")}
    env["PATH"] = f"{bin_dir}:{env.get('PATH', '')}"
    return env


def _jobd(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "jobd"), *args], env=env, capture_output=True, text=True, timeout=30
    )


@pytest.mark.parametrize("program", ["worker", "dev"])
@pytest.mark.parametrize("name", ["gpu box", "x" * 64, "", "-", "box_"])
def test_an_unusable_worker_name_is_one_error(tmp_path: Path, program: str, name: str) -> None:
    env = _fake_smi(tmp_path, LISTS_TWO)
    env["JOBD_DATA_DIR"] = str(tmp_path / "data")
    result = (
        _jobd(env, program, "--name", name, "--port", "9")
        if program == "dev"
        else (_jobd(env, program, "--name", name, "--server", "http://127.0.0.1:9"))
    )
    assert result.returncode == 1
    [line] = result.stderr.splitlines()
    assert line.startswith(f"jobd: error: worker name {name!r}")
    assert line.endswith("set another with --name or JOBD_WORKER_NAME")


@pytest.mark.parametrize(
    ("gpus", "said"),
    [
        ("0,7", "--gpus: GPU 7 is not on this host (the host has 0,1)"),
        ("-1", "--gpus '-1': GPU index -1 is negative"),
        ("0,0", "--gpus '0,0': GPU 0 is listed twice"),
        ("0:lots", "--gpus '0:lots': GPU 0: 'lots' is not a size"),
        ("0:24GiB,7:80GiB", "--gpus: GPU 7 is not on this host (the host has 0,1)"),
    ],
)
def test_gpu_indices_the_host_lacks_are_refused(tmp_path: Path, gpus: str, said: str) -> None:
    env = _fake_smi(tmp_path, LISTS_TWO)
    result = _jobd(env, "worker", "--gpus", gpus, "--server", "http://127.0.0.1:9")
    assert result.returncode == 1
    [line] = result.stderr.splitlines()
    assert line.startswith(f"jobd: error: {said}")


def test_a_declared_inventory_with_memory_is_accepted(tmp_path: Path) -> None:
    env = _fake_smi(tmp_path, LISTS_TWO)
    jobd = start_jobd(tmp_path, "--gpus", "1:80GiB,0:24GiB", env_extra={"PATH": env["PATH"]})
    try:
        with jobd.api() as api:
            spec = api.get("/workers/w1").json()["spec"]
        assert spec["gpus"] == [0, 1] and spec["slots"] == 2
        assert spec["gpu_memory"] == {"0": 24 << 30, "1": 80 << 30}
    finally:
        stop_jobd(jobd)


def test_a_failing_nvidia_smi_is_a_warning_not_silence(tmp_path: Path) -> None:
    env = _fake_smi(tmp_path, FAILS)
    worker = subprocess.Popen(
        [str(BIN / "jobd"), "worker", "--name", "w9", "--server", "http://127.0.0.1:9"],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert worker.stderr is not None
        deadline = time.monotonic() + 20
        warning = None
        while warning is None and time.monotonic() < deadline:
            line = worker.stderr.readline()
            if '"gpu_detection_failed"' in line:
                warning = json.loads(line)
    finally:
        worker.terminate()
        worker.wait(10)
    assert warning is not None and warning["level"] == "warning"
    assert "nvidia-smi exited 9: NVIDIA-SMI has failed" in warning["message"]
    assert "running with no GPUs" in warning["message"]


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--label", "gpu"], "jobd: error: --label 'gpu': 'gpu' is not a label: KEY=VALUE"),
        (["--label", "a=b=c"], "jobd: error: --label 'a=b=c': a: 'b=c' is not a label value"),
        (["--memory", "lots"], "jobd: error: 'lots' is not a size"),
        (["--mount-root", "data"], "jobd: error: --mount-root 'data': give an absolute path"),
    ],
)
def test_an_unusable_inventory_label_or_mount_root_is_one_error(
    tmp_path: Path, flags: list[str], said: str
) -> None:
    env = _fake_smi(tmp_path, LISTS_TWO)
    env["JOBD_DATA_DIR"] = str(tmp_path / "data")
    result = _jobd(env, "worker", *flags, "--server", "http://127.0.0.1:9")
    assert result.returncode == 1, result.stderr
    [line] = result.stderr.splitlines()
    assert line.startswith(said), line
