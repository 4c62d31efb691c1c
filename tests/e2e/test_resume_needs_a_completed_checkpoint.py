"""`job resume` of a job whose checkpoint never completed: refused with the way out
(--from-scratch or --force) on one line; each way out then does what it says."""

from __future__ import annotations

from tests.e2e.harness import Jobd


def _preempted_without_checkpoint(jobd: Jobd, name: str) -> int:
    job_id = int(jobd.ok("submit", "--name", name, "--env", "LR=3e-4", "--", "sleep", "60"))
    jobd.wait_phase(job_id, "Running")
    jobd.ok("preempt", str(job_id))  # sleep dies of the SIGTERM: no sentinel
    jobd.wait_phase(job_id, "Preempted")
    return job_id


def test_resume_without_a_checkpoint_asks_which_way(jobd: Jobd) -> None:
    job_id = _preempted_without_checkpoint(jobd, "early")
    refused = jobd.job("resume", str(job_id))
    assert refused.returncode == 1 and refused.stdout == ""
    assert "never completed a checkpoint" in refused.stderr
    assert "--from-scratch" in refused.stderr and "--force" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    assert jobd.get(job_id)["status"].get("resumed_by") is None

    both = jobd.job("resume", "--from-scratch", "--force", str(job_id))
    assert both.returncode == 2 and "exclude each other" in both.stderr

    fresh = jobd.get(int(jobd.ok("resume", "--from-scratch", str(job_id))))
    assert "RESUME_FROM" not in fresh["spec"]["env"] and fresh["spec"]["env"]["LR"] == "3e-4"
    assert fresh["metadata"]["labels"]["jobd/resumes"] == str(job_id)
    forced = jobd.get(int(jobd.ok("resume", "--force", str(job_id))))
    assert forced["spec"]["env"]["RESUME_FROM"].startswith(str(jobd.root / "ckpt" / str(job_id)))
    jobd.ok("cancel", str(fresh["metadata"]["id"]), str(forced["metadata"]["id"]))
