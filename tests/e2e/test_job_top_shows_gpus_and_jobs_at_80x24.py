"""`job top` in a real terminal (tmux, 80x24, as over plain SSH) against a real `jobd dev`
with a declared GPU inventory (`--gpus 0:24GiB,1:80GiB`, no real GPU): the worker's GPUs
with their memory and the job holding one, the running job's progress, the queue with
each job's reason, a preemption; `l` opens the selected job's output in the pager, `q`
leaves it and `q` again quits, leaving the terminal as it was; a larger window is used
at once. The same broker's /metrics exports the declared GPUs and their holder, promtool
clean."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.harness import BIN, Jobd, start_jobd, stop_jobd, write_script

TRAIN = """
import time
from jobd.client import report_progress
for step in range(1, 100000):
    report_progress(step, total=4000, loss=round(1 / step, 4))
    print("training step", step, flush=True)
    time.sleep(0.2)
"""
SLEEPS = "import time\ntime.sleep(600)\n"


def _tmux() -> str:
    tmux = shutil.which("tmux")
    if tmux is None:
        reason = "tmux is not installed (Debian: apt-get install tmux)"
        if os.environ.get("CI", "").lower() in {"true", "1"}:
            pytest.fail(f"CI=true and {reason}", pytrace=False)
        pytest.skip(reason)
    return tmux


@pytest.fixture(scope="module")
def gpus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Jobd]:
    jobd = start_jobd(tmp_path_factory.mktemp("top"), "--gpus", "0:24GiB,1:80GiB", "--slots", "1")
    yield jobd
    stop_jobd(jobd)


class Terminal:
    """One tmux server of our own (its own socket), one 80x24 window."""

    def __init__(self, tmux: str, root: Path) -> None:
        self.base = [tmux, "-S", str(root / "tmux.sock"), "-f", "/dev/null"]

    def run(self, *args: str) -> str:
        done = subprocess.run([*self.base, *args], capture_output=True, text=True, timeout=10)
        assert done.returncode == 0, done.stderr
        return done.stdout

    def screen(self) -> str:
        return self.run("capture-pane", "-p", "-t", "top")

    def keys(self, *keys: str) -> None:
        self.run("send-keys", "-t", "top", *keys)

    def wait_for(self, said: Callable[[str], bool], timeout: float = 20) -> str:
        deadline = time.monotonic() + timeout
        while True:
            text = self.screen()
            if said(text):
                return text
            assert time.monotonic() < deadline, f"the screen never showed it:\n{text}"
            time.sleep(0.1)


def test_top_shows_gpus_jobs_queue_and_preemptions_and_opens_logs(
    gpus: Jobd, tmp_path: Path
) -> None:
    train = int(
        gpus.ok(
            "submit",
            "--name",
            "train",
            "--gpus",
            "1",
            "--",
            *write_script(gpus.root, "train.py", TRAIN),
        ).strip()
    )
    victim = int(
        gpus.ok(
            "submit", "--name", "victim", "--", *write_script(gpus.root, "s.py", SLEEPS)
        ).strip()
    )
    gpus.wait_phase(train, "Running")
    gpus.wait_phase(victim, "Running")
    gpus.ok("preempt", str(victim))
    gpus.job("submit", "--name", "huge", "--gpus", "1", "--gpu-memory", "90GiB", "--", "true")
    env = {**gpus.env, "PAGER": "less +G", "TERM": "xterm-256color", "LANG": "C.UTF-8"}
    command = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    top = f"env -i {command} {shlex.quote(str(BIN / 'job'))} top --interval 0.5"
    command = f"{top}; echo top-exited-$?; sleep 60"  # the window stays to be read
    terminal = Terminal(_tmux(), tmp_path)
    terminal.run("new-session", "-d", "-s", "top", "-x", "80", "-y", "24", command)
    try:
        screen = terminal.wait_for(lambda s: "/4000" in s and "unschedulable" in s)
        lines = screen.splitlines()
        assert len(lines) <= 24 and max(len(line) for line in lines) <= 80
        rows = {line.split()[0]: line for line in lines if line.strip()}
        assert "24GiB" in screen and "80GiB" in screen, screen
        gpu_rows = [line for line in lines if "/24GiB" in line or "/80GiB" in line]
        assert len(gpu_rows) == 2 and "default/train" in gpu_rows[0], screen
        assert str(train) in rows and "default/train" in rows[str(train)], screen
        assert "unschedulable" in screen and "default/huge" in screen, screen
        assert any("manual" in line and f" {victim} " in line for line in lines), screen

        terminal.run("resize-window", "-t", "top", "-x", "120", "-y", "40")
        wide = terminal.wait_for(lambda s: "PHASE" in s)  # a column shown from 100 wide
        assert len(wide.splitlines()) <= 40 and max(len(line) for line in wide.splitlines()) > 80

        terminal.keys("l")  # the first running job is selected: train
        terminal.wait_for(lambda s: "training step" in s)
        terminal.keys("q")  # leaves the pager
        terminal.wait_for(lambda s: "RUNNING" in s and "training step" not in s)
        terminal.keys("q")
        terminal.wait_for(lambda s: "top-exited-0" in s)
    finally:
        subprocess.run([*terminal.base, "kill-server"], capture_output=True, timeout=10)


def test_top_into_a_pipe_prints_one_whole_frame_of_the_project_asked(gpus: Jobd) -> None:
    command = write_script(gpus.root, "s.py", SLEEPS)
    preempted = int(gpus.ok("submit", "--name", "piped", "--", *command).strip())
    gpus.wait_phase(preempted, "Running")
    gpus.ok("preempt", str(preempted))
    frame = gpus.ok("top")
    assert frame.startswith("jobd top") and "WORKERS 1" in frame, frame
    gpu_rows = [line for line in frame.splitlines() if "/24GiB" in line or "/80GiB" in line]
    assert len(gpu_rows) == 2, frame
    assert "q quit" not in frame, "no keys where none are read"
    assert _preemption_rows(frame, preempted), frame
    assert _preemption_rows(gpus.ok("top", "-p", "default"), preempted)
    other = gpus.ok("top", "--project", "nobody")
    assert "RUNNING 0" in other and not _preemption_rows(other, preempted), other


def _preemption_rows(frame: str, job: int) -> list[str]:
    after = frame.split("RECENT PREEMPTIONS", 1)[1].splitlines()[2:]
    return [line for line in after if line.split()[1:2] == [str(job)]]


def test_metrics_export_the_declared_gpus_and_their_holder_promtool_clean(gpus: Jobd) -> None:
    command = write_script(gpus.root, "holds.py", SLEEPS)
    held = int(gpus.ok("submit", "--name", "holds", "--gpus", "1", "--", *command).strip())
    gpu = gpus.wait_phase(held, "Running")["status"]["gpus"][0]
    text = httpx.get(f"{gpus.url}/metrics", timeout=5).text
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name.startswith("jobd_gpu_")
    }
    holder = {"job_id": str(held), "job_name": "default/holds", "project": "default"}
    assert samples[("jobd_gpu_memory_total_bytes", _labels(0))] == 24 * (1 << 30)
    assert samples[("jobd_gpu_memory_total_bytes", _labels(1))] == 80 * (1 << 30)
    assert samples[("jobd_gpu_job_info", _labels(gpu, **holder))] == 1
    assert not any(name == "jobd_gpu_memory_used_bytes" for name, _ in samples), "no NVML here"
    promtool = shutil.which("promtool")
    if promtool is None:
        if os.environ.get("CI", "").lower() in {"true", "1"}:
            pytest.fail("CI=true and promtool is not installed", pytrace=False)
        pytest.skip("promtool is not installed (Debian: apt-get install prometheus)")
    checked = subprocess.run(
        [promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=30
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


def _labels(gpu: int, **more: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted({"worker": "w1", "gpu": str(gpu), **more}.items()))
