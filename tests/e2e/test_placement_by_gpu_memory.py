"""Placement by GPU memory on a declared inventory, with CPU slots and GPUs apart (issue
14, item 4), as a user meets it through `jobd dev` and `job`.

The worker declares `--gpus 0:24GiB,1:80GiB --slots 2` (this host has no nvidia-smi, so
the inventory is trusted). Two CPU jobs fill the two slots and keep no GPU job waiting;
a job asking 40GiB gets GPU 1, one asking 16GiB GPU 0 (its best fit), and one asking
100GiB is said Unschedulable. Each job prints the CUDA_VISIBLE_DEVICES it was given.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.harness import Jobd, manifest, start_jobd, stop_jobd, write_script

GIB = 1 << 30
# Says which GPUs it was given, then waits to be cancelled.
SHOWS_GPUS = """\
import os, time
print("gpus=" + os.environ["CUDA_VISIBLE_DEVICES"], flush=True)
time.sleep(120)
"""


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Jobd]:
    root = tmp_path_factory.mktemp("gpulab")
    running = start_jobd(root, "--gpus", "0:24GiB,1:80GiB", "--slots", "2")
    yield running
    stop_jobd(running)


def _submit(jobd: Jobd, *args: str) -> int:
    return int(jobd.ok("submit", *args).strip())


def _printed(jobd: Jobd, job_id: int) -> str:
    """What the job printed, once it has (its output reaches the broker shortly after)."""
    jobd.wait_phase(job_id, "Running")
    deadline = time.monotonic() + 20
    while "gpus=" not in (out := jobd.ok("logs", str(job_id))):
        assert time.monotonic() < deadline, f"job {job_id} printed nothing"
        time.sleep(0.05)
    return out.strip()


def test_jobs_are_placed_by_gpu_memory_and_cpu_jobs_block_no_gpu(lab: Jobd, tmp_path: Path) -> None:
    argv = write_script(tmp_path, "shows_gpus.py", SHOWS_GPUS)
    cpus = [_submit(lab, "--", *argv) for _ in range(3)]
    for job_id in cpus[:2]:
        assert _printed(lab, job_id) == "gpus="

    big_doc = manifest("big", argv, resources={"gpus": 1, "gpu_memory": "40GiB"})
    lab.ok("apply", "-f", "-", input=big_doc)
    big = int(lab.get("default/big")["metadata"]["id"])
    small = _submit(lab, "--gpus", "1", "--gpu-memory", "16GiB", "--", *argv)
    assert _printed(lab, big) == "gpus=1", "40GiB fits only GPU 1"
    assert _printed(lab, small) == "gpus=0", "16GiB fits both: the smaller one is its best fit"
    assert lab.get(big)["status"]["gpus"] == [1]
    assert lab.get(big)["spec"]["resources"] == {"gpus": 1, "gpu_memory": 40 * GIB}
    assert lab.ok("apply", "-f", "-", input=big_doc).strip() == "job/big unchanged"
    assert lab.get(cpus[2])["status"]["phase"] == "Pending", "--slots 2 bounds the CPU jobs"

    worker = json.loads(lab.ok("get", "workers", "w1", "-o", "json"))
    assert worker["spec"]["gpus"] == [0, 1]
    assert worker["spec"]["gpu_memory"] == {"0": 24 * GIB, "1": 80 * GIB}
    assert f"0:24GiB({small}),1:80GiB({big})" in lab.ok("workers").split()

    for job_id in (*cpus, big, small):
        lab.ok("cancel", str(job_id))


def test_a_job_asking_more_memory_than_any_gpu_has_is_unschedulable(lab: Jobd) -> None:
    submitted = lab.job("submit", "--gpus", "1", "--gpu-memory", "100GiB", "--", "true")
    assert submitted.returncode == 0, submitted.stderr
    job_id = int(submitted.stdout.strip())
    said = "no worker has 1 GPU with 100GiB each (no GPU with that much; the largest GPU has 80GiB)"
    assert said in submitted.stderr
    doc = lab.get(job_id)
    scheduled = next(c for c in doc["status"]["conditions"] if c["type"] == "Scheduled")
    assert (doc["status"]["phase"], scheduled["reason"]) == ("Pending", "Unschedulable")
    assert scheduled["message"] == said
    lab.ok("cancel", str(job_id))


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--gpu-memory", "40GiB"], "--gpu-memory: gpu_memory is memory per GPU: ask for gpus"),
        (["--gpus", "1", "--gpu-memory", "lots"], "--gpu-memory: 'lots' is not a size"),
        (["--gpus", "-1"], "--gpus: Input should be greater than or equal to 0"),
        (["--gpus", "65"], "--gpus: Input should be less than or equal to 64"),
    ],
)
def test_bad_gpu_requests_are_refused_naming_the_flag(
    lab: Jobd, args: list[str], said: str
) -> None:
    before = lab.ok("get", "-o", "json")
    result = lab.job("submit", *args, "--", "true")
    assert result.returncode != 0
    assert said in result.stderr
    assert lab.ok("get", "-o", "json") == before, "nothing was created"
