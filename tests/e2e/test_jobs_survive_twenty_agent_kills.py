"""Soak: `jobd dev` killed -9 twenty times while jobs start, print and end (`make soak`).

Every job ends exactly once with its own exit code, none is started twice, and each
one's output arrives whole and in order, across all the kills.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

from tests.e2e.harness import manifest, start_jobd, stop_jobd, write_script

pytestmark = pytest.mark.soak

KILLS = 20
JOBS_PER_ROUND = 3

# Counts its starts, prints numbered lines for a while, exits with the code it was given.
WORKLOAD = """
import os, sys, time
name, code, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
with open(name + ".starts", "a") as f:
    f.write(f"{os.getpid()}\\n")
end, i = time.monotonic() + seconds, 0
while time.monotonic() < end:
    print(f"line {i}", flush=True)
    i += 1
    time.sleep(0.05)
print(f"last {i}", flush=True)
sys.exit(code)
"""


def test_no_job_is_lost_or_started_twice_across_twenty_agent_kills(tmp_path: Path) -> None:
    rng = random.Random(11)
    argv = write_script(tmp_path, "work.py", WORKLOAD)
    expected: dict[str, int] = {}
    jobd = start_jobd(tmp_path, "--slots", "4")
    try:
        for round_ in range(KILLS):
            for k in range(JOBS_PER_ROUND):
                name = f"j{round_}-{k}"
                expected[name] = rng.randrange(0, 5)
                seconds = f"{rng.uniform(0.1, 2.5):.2f}"
                command = [*argv, str(tmp_path / name), str(expected[name]), seconds]
                doc = manifest(name, command, cwd=str(tmp_path))
                jobd.ok("apply", "-f", "-", input=doc)
            time.sleep(rng.uniform(0.2, 1.0))
            jobd.process.kill()
            jobd.process.wait(5)
            jobd = start_jobd(tmp_path, "--slots", "4")
        for name, code in expected.items():
            doc = jobd.wait_phase(name, "Succeeded", "Failed", timeout=120)
            assert (doc["status"]["exit_code"], doc["status"]["reason"]) == (
                code,
                "exit 0" if code == 0 else f"exit code {code}",
            ), name
            starts = (tmp_path / f"{name}.starts").read_text().split()
            assert len(starts) == 1, f"{name} started {len(starts)} times"
            lines = jobd.ok("logs", name).splitlines()
            last = int(lines[-1].split()[1])
            assert lines == [f"line {i}" for i in range(last)] + [f"last {last}"], name
    finally:
        stop_jobd(jobd)
