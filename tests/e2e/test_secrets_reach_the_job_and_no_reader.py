"""Secrets in job specs through the real `jobd dev` and the real `job` command.

The workload compares a hash of `$HF_TOKEN` and `$WANDB_API` (a key its project marks
secret) with the one the test expects, and exits 0 only on a match: the process really
received the values. Every surface a user reads — `job get -o json|yaml`, `job describe`,
the job's output, events.jsonl, the broker's own log lines — shows the mask; the SQLite
file keeps no value once the job ended; a Preempted job keeps them, and its resume runs
with them.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import sys
from pathlib import Path

from tests.e2e.harness import Jobd, write_script

HF, WANDB = "hf_e2eReAlVaLuE-4242", "wandb-e2e-real-1717"
DIGEST = hashlib.sha256(f"{HF}:{WANDB}".encode()).hexdigest()
CHECK = f"""\
import hashlib, os, sys, time
seen = hashlib.sha256(f"{{os.environ.get('HF_TOKEN')}}:{{os.environ.get('WANDB_API')}}".encode())
if seen.hexdigest() != "{DIGEST}":
    print("mismatch", seen.hexdigest(), flush=True)
    sys.exit(3)
print("match", seen.hexdigest(), "epochs", os.environ["EPOCHS"], flush=True)
if len(sys.argv) > 1 and not os.environ.get("RESUME_FROM"):
    time.sleep(120)  # the long run, until it is preempted
"""
PROJECT = {
    "apiVersion": "jobd/v1",
    "kind": "Project",
    "metadata": {"name": "nlp"},
    "spec": {"secret_env_keys": ["WANDB_API"]},
}


def _manifest(name: str, command: list[str]) -> str:
    job = {
        "apiVersion": "jobd/v1",
        "kind": "Job",
        "metadata": {"name": name, "project": "nlp"},
        "spec": {"command": command, "env": {"HF_TOKEN": HF, "WANDB_API": WANDB, "EPOCHS": "3"}},
    }
    return json.dumps(PROJECT) + "\n---\n" + json.dumps(job)


def _in_store(jobd: Jobd, job_id: int) -> list[str]:
    """The job's row and its changes in the SQLite file, as any reader of the file sees."""
    with sqlite3.connect(jobd.root / "data" / "jobd.db") as db:
        rows = db.execute("SELECT body FROM jobs WHERE id = ?", (job_id,)).fetchall()
        rows += db.execute("SELECT body FROM changes WHERE key = ?", (str(job_id),)).fetchall()
    return [body for (body,) in rows]


def _leaks(text: str) -> bool:
    return HF in text or WANDB in text


def test_the_job_gets_its_secrets_and_no_reader_does(jobd: Jobd) -> None:
    path = Path(jobd.root / "check.yaml")
    path.write_text(_manifest("check", write_script(jobd.root, "check.py", CHECK)))
    assert jobd.ok("apply", "-f", str(path)).split() == [
        *("project/nlp", "created"),
        *("job/nlp/check", "created"),
    ]
    done = jobd.wait_phase("nlp/check", "Succeeded", "Failed")
    output = jobd.ok("logs", "nlp/check")
    assert done["status"]["phase"] == "Succeeded", output  # exit 0: the values matched
    assert output == f"match {DIGEST} epochs 3\n"

    job_id = done["metadata"]["id"]
    assert done["spec"]["env"] == {"HF_TOKEN": "***", "WANDB_API": "***", "EPOCHS": "3"}
    reads = (["get", "nlp/check", "-o", "yaml"], ["get", "-o", "json"], ["describe", "nlp/check"])
    for args in reads:
        shown = jobd.ok(*args)
        assert "***" in shown and "EPOCHS" in shown and not _leaks(shown), args
    assert not _leaks((jobd.root / "logs" / "events.jsonl").read_text())
    assert not _leaks((jobd.root / "dev.log").read_text())  # the broker's and worker's logs
    stored = _in_store(jobd, job_id)
    assert len(stored) > 3 and not any(_leaks(body) for body in stored)

    # The manifest applied again is unchanged: its values are not compared with the mask.
    assert jobd.ok("apply", "-f", str(path)).split()[-1] == "unchanged"


def test_a_preempted_job_keeps_its_secrets_and_resumes_with_them(jobd: Jobd) -> None:
    path = Path(jobd.root / "long.yaml")
    command = [*write_script(jobd.root, "long.py", CHECK), "--long"]
    path.write_text(_manifest("long", command))
    jobd.ok("apply", "-f", str(path))
    running = jobd.wait_phase("nlp/long", "Running")
    job_id = running["metadata"]["id"]

    # What a masked read gives back, applied, changes nothing: the values stay real.
    read = jobd.ok("get", "nlp/long", "-o", "yaml")
    assert jobd.ok("apply", "-f", "-", input=read).split()[-1] == "unchanged"
    assert all(_leaks(body) for body in _in_store(jobd, job_id))

    jobd.ok("preempt", "nlp/long")
    jobd.wait_phase("nlp/long", "Preempted")
    assert _leaks(_in_store(jobd, job_id)[0])  # kept: the resume needs them

    resumed_id = int(jobd.ok("resume", "--force", "nlp/long"))  # it never checkpointed
    done = jobd.wait_phase(resumed_id, "Succeeded", "Failed")
    output = jobd.ok("logs", str(resumed_id))
    assert done["status"]["phase"] == "Succeeded", output
    assert output == f"match {DIGEST} epochs 3\n"
    assert not any(_leaks(body) for body in _in_store(jobd, resumed_id))


def test_the_mask_is_no_value_for_a_new_job(jobd: Jobd) -> None:
    refused = jobd.job("submit", "-p", "nlp", "--env", "WANDB_API=***", "--", sys.executable)
    assert refused.returncode != 0
    assert "spec.env.WANDB_API" in refused.stderr and "Traceback" not in refused.stderr


def test_a_queued_jobs_new_secret_value_is_diffed_unshown_and_applied(jobd: Jobd) -> None:
    def queued(value: str) -> str:  # a GPU this worker lacks: it stays Pending
        doc = json.loads(_manifest("queued", [sys.executable, "-c", "pass"]).split("---")[1])
        doc["spec"]["env"]["HF_TOKEN"] = value
        doc["spec"]["resources"] = {"gpus": 1}
        return json.dumps(doc)

    (jobd.root / "queued.yaml").write_text(queued(HF))
    jobd.ok("apply", "-f", "queued.yaml")
    job_id = jobd.get("nlp/queued")["metadata"]["id"]
    (jobd.root / "rotated.yaml").write_text(queued("hf_rotated-9999"))
    diff = jobd.job("diff", "-f", "rotated.yaml")
    assert diff.returncode == 1, diff.stderr
    assert "a secret env value changes" in diff.stdout and "rotated" not in diff.stdout
    assert jobd.ok("apply", "-f", "rotated.yaml").split()[-1] == "configured"
    assert "hf_rotated-9999" in _in_store(jobd, job_id)[0]
    jobd.ok("cancel", "nlp/queued")
    assert not any("hf_rotated" in body for body in _in_store(jobd, job_id))
