"""`job cordon`, `job uncordon` and `job drain` through the real `job` and `jobd dev`.

The worker's name comes from a hostname-like `GPU-Box.Lab`: it registers as
`gpu-box.lab`, and the verbs take either spelling. Jobs are real processes; the
preempted one checkpoints in its grace window with `jobd.client`'s helper.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.harness import BIN, Jobd, start_jobd, stop_jobd, write_script

NAME = "gpu-box.lab"
CHECKPOINTS = """\
import os, time
from pathlib import Path
from jobd.client import install_preemption_handler
def checkpoint(remaining):
    time.sleep(0.5)  # a checkpoint that takes a while: the grace lets it finish
    Path(os.environ["JOBD_CHECKPOINT_DIR"], "latest.txt").write_text("step 7")
install_preemption_handler(checkpoint)
print("ready", flush=True)
time.sleep(600)
"""


@pytest.fixture(scope="module")
def jobd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Jobd]:
    root = tmp_path_factory.mktemp("drain")
    running = start_jobd(root, "--slots", "2", env_extra={"JOBD_WORKER_NAME": "GPU-Box.Lab"})
    yield running
    stop_jobd(running)


@pytest.fixture(autouse=True)
def uncordoned(jobd: Jobd) -> Iterator[None]:
    yield
    jobd.ok("uncordon", NAME)


def _submit(jobd: Jobd, *args: str) -> int:
    return int(jobd.ok("submit", *args).strip())


def _worker(jobd: Jobd) -> dict[str, object]:
    with jobd.api() as api:
        found: dict[str, object] = api.get(f"/workers/{NAME}").json()
    return found


def _wait_ready(jobd: Jobd, job_id: int) -> None:
    deadline = time.monotonic() + 30
    while "ready" not in jobd.ok("logs", str(job_id)):
        assert time.monotonic() < deadline, f"job {job_id} never printed ready"
        time.sleep(0.1)


def test_a_hostname_with_capitals_registers_lower_cased(jobd: Jobd) -> None:
    assert _worker(jobd)["metadata"]["name"] == NAME  # type: ignore[index]
    assert jobd.events(event="worker_registered")[0]["worker"] == NAME
    log = (jobd.root / "dev.log").read_text()
    said = [json.loads(line) for line in log.splitlines() if "worker_name_normalised" in line]
    assert said and said[0]["given"] == "GPU-Box.Lab" and said[0]["worker"] == NAME


def test_a_cordoned_worker_runs_no_new_job_until_uncordoned(jobd: Jobd) -> None:
    assert jobd.ok("cordon", "GPU-Box.Lab").strip() == f"worker/{NAME} cordoned"
    assert "Ready,SchedulingDisabled" in jobd.ok("workers")
    job_id = _submit(jobd, "--", "true")
    time.sleep(1.0)  # an uncordoned worker would have run it in a tenth of that
    assert jobd.get(job_id)["status"]["phase"] == "Pending"
    assert jobd.ok("uncordon", NAME).strip() == f"worker/{NAME} uncordoned"
    jobd.wait_phase(job_id, "Succeeded")
    assert "SchedulingDisabled" not in jobd.ok("workers")
    assert [e["worker"] for e in jobd.events(event="worker_cordoned")][-1:] == [NAME]
    assert [e["worker"] for e in jobd.events(event="worker_uncordoned")][-1:] == [NAME]


def test_drain_waits_for_a_running_job_to_end(jobd: Jobd) -> None:
    flag = jobd.root / "may-end"
    script = f"import os, time\nwhile not os.path.exists({str(flag)!r}): time.sleep(0.05)\n"
    job_id = _submit(jobd, "--", *write_script(jobd.root, "waits.py", script))
    jobd.wait_phase(job_id, "Running")
    drain = subprocess.Popen(
        [str(BIN / "job"), "drain", NAME, "--timeout", "60"],
        env=jobd.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert drain.stderr is not None
    # It shows what it waits for, and goes on waiting while the job runs.
    assert drain.stderr.readline().strip() == f"waiting for 1 job on {NAME}: job/{job_id} (Running)"
    time.sleep(1.0)
    assert drain.poll() is None
    flag.touch()
    out, _ = drain.communicate(timeout=30)
    assert drain.returncode == 0
    assert out.splitlines() == [f"worker/{NAME} cordoned", f"worker/{NAME} drained"]
    assert jobd.get(job_id)["status"]["phase"] == "Succeeded"  # ended on its own
    assert _worker(jobd)["spec"]["cordoned"] is True  # type: ignore[index]


def test_drain_preempt_preempts_with_the_grace_and_exits_0(jobd: Jobd) -> None:
    argv = write_script(jobd.root, "checkpoints.py", CHECKPOINTS)
    job_id = _submit(jobd, "--preemptible", "--checkpoint-grace", "20", "--", *argv)
    jobd.wait_phase(job_id, "Running")
    _wait_ready(jobd, job_id)  # its SIGTERM handler is installed once it printed "ready"
    result = jobd.job("drain", NAME, "--preempt", "--timeout", "30", "-o", "json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["drained"] is True and report["preempted"] == [job_id]
    done = jobd.get(job_id)
    assert done["status"]["phase"] == "Preempted"
    assert (Path(done["status"]["checkpoint_dir"]) / "latest.txt").read_text() == "step 7"
    [preempt] = [e for e in jobd.events(event="auto_preempt") if e["job"] == job_id]
    assert preempt["reason"] == "drain"
    assert [e["job"] for e in jobd.events(event="checkpoint_complete")].count(job_id) == 1


def test_drain_times_out_naming_the_job_that_is_not_preemptible(jobd: Jobd) -> None:
    job_id = _submit(jobd, "--", "sleep", "600")
    jobd.wait_phase(job_id, "Running")
    result = jobd.job("drain", NAME, "--preempt", "--timeout", "1")
    assert result.returncode == 1
    [error] = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert f"job/{job_id} (Running, not preemptible)" in error
    assert f"worker {NAME} is not drained after 1 s (it stays cordoned)" in error
    assert jobd.get(job_id)["status"]["phase"] == "Running"  # never killed
    jobd.ok("cancel", str(job_id))
    jobd.wait_phase(job_id, "Cancelled")


def test_an_unknown_or_unusable_worker_is_one_error(jobd: Jobd) -> None:
    missing = jobd.job("cordon", "nope")
    assert missing.returncode == 1
    assert missing.stderr.strip() == "error: worker nope is not registered"
    bad = jobd.job("drain", "gpu box")
    assert bad.returncode == 1 and bad.stderr.startswith("error: worker name 'gpu box'")


@pytest.fixture
def own_jobd(tmp_path: Path) -> Iterator[Jobd]:
    running = start_jobd(tmp_path, "--slots", "1")
    yield running
    stop_jobd(running)


def test_the_cordon_outlives_a_restart_of_broker_and_worker(own_jobd: Jobd) -> None:
    own_jobd.ok("cordon", "w1")
    stop_jobd(own_jobd)
    again = start_jobd(own_jobd.root, "--slots", "1")
    own_jobd.process = again.process
    assert "Ready,SchedulingDisabled" in again.ok("workers")
    job_id = _submit(again, "--", "true")
    time.sleep(1.0)
    assert again.get(job_id)["status"]["phase"] == "Pending"
    again.ok("uncordon", "w1")
    again.wait_phase(job_id, "Succeeded")
