"""Fair share, quotas, borrowing and reclaim end to end: `jobd dev` with four (declared)
GPUs, real processes, `job` as a user runs it, and a one-second fair-share half-life.

Fair share: project a queues 200 one-GPU jobs; project b, of equal priority and equal
shares, queues 20 a few seconds later. First come would run b after all of a's; fair
share gives b GPUs at once, and once b's usage has caught up with a's (a few half-lives)
the two run about two GPUs each. The bound held: over the stretch from three half-lives
after b's arrival until b's last job is bound, b holds between 30 % and 70 % of the
GPU-seconds (its share is 50 %).

Quotas: on a worker of two GPUs, a project of `gpus: 1` that does not borrow runs one
job and the other waits `QuotaExceeded`; one that borrows takes both GPUs, and when a
project within its quota submits, the borrowed (preemptible) job is preempted through
path B with reason `reclaim`, checkpoints in its grace, and its `auto_preempt` /
`checkpoint_complete` pair names the waiting job, which then runs.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from datetime import datetime

import pytest

from tests.e2e.harness import REPO, Jobd, manifest, start_jobd, stop_jobd

HALF_LIFE_S = 1.0
JOB_S = 1.0
FAIR_PROJECTS = """\
projects:
  a: {priority: 5, shares: 1}
  b: {priority: 5, shares: 1}
"""
QUOTA_PROJECTS = """\
projects:
  strict: {quota: {gpus: 1}, borrow: false}
  lender:
    quota: {gpus: 1}
    defaults: {preemptible: true, checkpoint_grace_s: 20}
  owner: {quota: {gpus: 1}}
"""
TRAIN = [sys.executable, str(REPO / "examples" / "train_numpy.py")]


def _jobd(root_factory: pytest.TempPathFactory, name: str, projects: str, gpus: str) -> Jobd:
    root = root_factory.mktemp(name)
    (root / "projects.yaml").write_text(projects)
    return start_jobd(
        root,
        "--gpus",
        gpus,
        "--projects",
        str(root / "projects.yaml"),
        "--fairshare-half-life",
        str(HALF_LIFE_S),
    )


@pytest.fixture
def four_gpus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Jobd]:
    running = _jobd(tmp_path_factory, "fair", FAIR_PROJECTS, "0,1,2,3")
    yield running
    stop_jobd(running)


@pytest.fixture
def two_gpus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Jobd]:
    running = _jobd(tmp_path_factory, "quota", QUOTA_PROJECTS, "0,1")
    yield running
    stop_jobd(running)


def _apply_many(jobd: Jobd, project: str, count: int) -> None:
    docs = [
        manifest(f"{project}{i}", ["sleep", str(JOB_S)], project=project, resources={"gpus": 1})
        for i in range(count)
    ]
    jobd.ok("apply", "-f", "-", input="\n---\n".join(docs))


def _jobs(jobd: Jobd, project: str) -> list[dict[str, object]]:
    return json.loads(jobd.ok("get", "-p", project, "-o", "json"))  # type: ignore[no-any-return]


def _at(value: object) -> float:
    return datetime.fromisoformat(str(value)).timestamp()


def _held(jobs: list[dict[str, object]], start: float, end: float) -> float:
    """GPU-seconds these jobs held (bound to end) within [start, end]."""
    total = 0.0
    for job in jobs:
        status = job["status"]
        assert isinstance(status, dict)
        if status.get("scheduled_at") is None:
            continue
        bound = _at(status["scheduled_at"])
        ended = _at(status["finished_at"]) if status.get("finished_at") else end
        total += max(0.0, min(ended, end) - max(bound, start))
    return total


def test_running_shares_converge_to_the_configured_shares(four_gpus: Jobd) -> None:
    jobd = four_gpus
    _apply_many(jobd, "a", 200)
    time.sleep(3 * JOB_S)  # a holds every GPU and has built up usage
    arrived = time.time()
    _apply_many(jobd, "b", 20)
    b_last = jobd.wait_phase("b/b19", "Running", "Succeeded", timeout=90)
    last_bound = _at(b_last["status"]["scheduled_at"])
    a_jobs, b_jobs = _jobs(jobd, "a"), _jobs(jobd, "b")
    # First come would have run none of b's before a's 200 (minutes); b got GPUs at once.
    first_b = min(_at(j["status"]["scheduled_at"]) for j in b_jobs)  # type: ignore[index]
    assert first_b - arrived < 3 * JOB_S
    start = arrived + 3 * HALF_LIFE_S
    assert last_bound - start > 2 * JOB_S, "the measured stretch is too short to judge"
    b_held, a_held = _held(b_jobs, start, last_bound), _held(a_jobs, start, last_bound)
    b_share = b_held / (a_held + b_held)
    print(f"b held {b_share:.1%} of {a_held + b_held:.1f} GPU-seconds from {start} to {last_bound}")
    assert 0.3 <= b_share <= 0.7, f"b held {b_share:.0%} of the GPU-seconds; its share is 50%"

    usage = json.loads(jobd.ok("usage", "-o", "json"))
    rows = {row["project"]: row for row in usage["projects"]}
    assert rows["a"]["usage"] > 0 and rows["b"]["usage"] > 0
    assert rows["a"]["share"] == rows["b"]["share"] == 0.5
    assert usage["half_life_s"] == HALF_LIFE_S
    table = jobd.ok("usage")
    assert "PROJECT" in table and "FACTOR" in table
    metrics = jobd.api().get("/metrics").text
    assert 'jobd_fairshare_factor{project="b"}' in metrics


def _scheduled_condition(job: dict[str, object]) -> dict[str, object] | None:
    status = job["status"]
    assert isinstance(status, dict)
    found = [c for c in status["conditions"] if c["type"] == "Scheduled"]
    return found[0] if found else None


def _submit(jobd: Jobd, project: str, *command: str) -> int:
    return int(jobd.ok("submit", "-p", project, "--gpus", "1", "--", *command).strip())


def test_quota_borrowing_and_reclaim(two_gpus: Jobd) -> None:
    jobd = two_gpus
    # A project that does not borrow: one job of its one GPU, the other waits.
    held = _submit(jobd, "strict", "sleep", "30")
    jobd.wait_phase(held, "Running")
    waiting = _submit(jobd, "strict", "sleep", "30")
    deadline = time.monotonic() + 10
    while (said := _scheduled_condition(jobd.get(waiting))) is None:
        assert time.monotonic() < deadline, "the over-quota job never said why it waits"
        time.sleep(0.1)
    assert (said["status"], said["reason"]) == ("False", "QuotaExceeded")
    assert "past its quota of 1" in str(said["message"])
    assert jobd.get(waiting)["status"]["phase"] == "Pending"  # a GPU idles: no borrowing
    jobd.ok("cancel", str(held), str(waiting))
    jobd.wait_phase(held, "Cancelled")

    # A project that borrows takes both idle GPUs.
    slow = {"TRAIN_STEP_SLEEP": "0.01"}
    # One after the other: the borrowed job is the one started last, which reclaim takes
    # (least work lost); two started in one pass may start in either order.
    ids = []
    for i in range(2):
        doc = manifest(f"train{i}", TRAIN, project="lender", env=slow, resources={"gpus": 1})
        jobd.ok("apply", "-f", "-", input=doc)
        ids.append(jobd.wait_phase(f"lender/train{i}", "Running")["metadata"]["id"])
    own, borrowed = ids

    # A project within its quota arrives: the newest borrowed job gives its GPU back.
    claimant = _submit(jobd, "owner", sys.executable, "-c", "print('reclaimed')")
    assert jobd.wait_phase(claimant, "Succeeded", timeout=40)["status"]["exit_code"] == 0
    victim = jobd.wait_phase(borrowed, "Preempted")
    assert victim["status"]["preemption"]["reason"] == "reclaim"
    preempts = jobd.events(event="auto_preempt", job=borrowed)
    checkpoints = jobd.events(event="checkpoint_complete", job=borrowed)
    assert len(preempts) == 1 and len(checkpoints) == 1
    assert preempts[0]["reason"] == "reclaim"
    assert preempts[0]["candidate_job"] == claimant == checkpoints[0]["candidate_job"]
    assert (jobd.root / "ckpt" / str(borrowed) / "latest.npz").is_file()
    # The lender keeps its quota's worth: its own job was never touched.
    assert jobd.get(own)["status"]["phase"] in ("Running", "Succeeded")
    assert not jobd.events(event="auto_preempt", job=own)
