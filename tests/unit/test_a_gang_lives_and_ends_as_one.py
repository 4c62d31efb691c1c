"""A multi-host job's rules (controllers/gangs.py), in memory: one life for the group.

The job is Running once every member runs; the first member to fail stops the others and
the job ends Failed naming that rank, only once every member has ended; all exit 0:
Succeeded; cancel ends it when all members ended; the checkpoint is complete once every
member saw the sentinel; progress is rank 0's; a retry clears the members, each rank
resuming from its own checkpoint; a report from
a worker that is not that member's is refused.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from jobd.api.models import Job, JobSpec, ObjectMeta, Phase, RetryPolicy
from jobd.controllers import gangs, transitions
from jobd.controllers.errors import TransitionError
from jobd.worker.jobview import JobView
from jobd.worker.settings import WorkerSettings, workload_env
from tests.gang_binding import bind_gang
from tests.unit.conftest import NOW

P = Phase
WORKERS = ["a", "b", "c"]


def bound_gang(nodes: int = 3, retry: RetryPolicy | None = None) -> Job:
    spec = JobSpec(command=["x"], nodes=nodes, retry=retry)
    job = Job(metadata=ObjectMeta(id=7, name="g", resource_version=3), spec=spec)
    job.status.dependencies_met = True
    placements = [(w, f"127.0.0.{i + 2}", []) for i, w in enumerate(WORKERS[:nodes])]
    job, events = bind_gang(job, placements, NOW)
    assert [e.event for e in events] == ["job_scheduled"]
    return job


def running_gang(nodes: int = 3, retry: RetryPolicy | None = None) -> Job:
    job = bound_gang(nodes, retry)
    for rank in range(nodes):
        port = 29500 if rank == 0 else None
        job, _ = gangs.start(job, WORKERS[rank], rank, NOW, 1, (port, f"/ck/{rank}"))
    return job


def test_bind_mirrors_rank_0_and_one_attempt_covers_the_group() -> None:
    job = bound_gang()
    status = job.status
    assert status.phase == P.SCHEDULED and status.attempt == 1 and status.worker == "a"
    assert [(m.rank, m.worker, m.address) for m in status.members] == [
        (0, "a", "127.0.0.2"),
        (1, "b", "127.0.0.3"),
        (2, "c", "127.0.0.4"),
    ]
    assert gangs.member_workers(job) == WORKERS and gangs.rank_of(job, "c") == 2
    assert gangs.runs_on(job, "b") and not gangs.runs_on(job, "z")


def test_the_job_runs_once_every_member_runs_and_keeps_rank_0s_port() -> None:
    job = bound_gang()
    job, events = gangs.start(job, "a", 0, NOW, 1, (29500, "/ck/0"))
    assert job.status.phase == P.SCHEDULED and not events
    assert job.status.master_port == 29500 and job.status.checkpoint_dir == "/ck/0"
    job, _ = gangs.start(job, "b", 1, NOW, 1)
    job, events = gangs.start(job, "c", 2, NOW, 1)
    assert job.status.phase == P.RUNNING and [e.event for e in events] == ["job_started"]
    assert [m.phase for m in job.status.members] == [P.RUNNING] * 3
    again, events = gangs.start(job, "c", 2, NOW, 1)
    assert again is job and not events


def test_a_report_from_another_worker_or_rank_or_attempt_is_refused() -> None:
    job = bound_gang()
    with pytest.raises(TransitionError, match="member 1 of job 7 is bound to 'b'"):
        gangs.start(job, "a", 1, NOW, 1)
    with pytest.raises(TransitionError, match="is bound to None"):
        gangs.start(job, "a", 5, NOW, 1)
    with pytest.raises(TransitionError, match="attempt"):
        gangs.start(job, "b", 1, NOW, 2)


def test_the_first_failing_member_stops_the_rest_and_the_job_fails_naming_it() -> None:
    job = running_gang()
    job, events = gangs.complete(job, "b", 1, (3, None), NOW, 1)
    status = job.status
    assert not events and status.phase == P.RUNNING
    assert status.signal == "cancel" and status.desired_phase == P.FAILED
    assert status.failed_rank == 1 and status.exit_code == 3
    stopped, _ = transitions.stopping(job, "a", NOW, 1, 0)
    assert stopped.status.phase == P.RUNNING  # stopping others: not Cancelling
    job, events = gangs.complete(job, "a", 0, (None, 15), NOW, 1)
    assert job.status.phase == P.RUNNING and not events  # c still runs
    job, events = gangs.complete(job, "c", 2, (None, 15), NOW, 1)
    status = job.status
    assert status.phase == P.FAILED and status.failed_rank == 1
    assert (status.exit_code, status.exit_signal) == (3, None)
    assert status.reason == "rank 1 failed: exit code 3"
    assert [(e.event, e.fields["phase"]) for e in events] == [("job_finished", "Failed")]
    assert [m.phase for m in status.members] == [P.FAILED] * 3


def test_all_members_exiting_0_succeed_and_a_late_report_changes_nothing() -> None:
    job = running_gang(2)
    job, events = gangs.complete(job, "b", 1, (0, None), NOW, 1)
    assert job.status.phase == P.RUNNING and job.status.members[1].phase == P.SUCCEEDED
    job, events = gangs.complete(job, "a", 0, (0, None), NOW, 1, None, "/ck/0/latest.pt")
    assert job.status.phase == P.SUCCEEDED and job.status.exit_code == 0
    assert job.status.checkpoint_latest == "/ck/0/latest.pt"
    late, events = gangs.complete(job, "b", 1, (1, None), NOW, 1)
    assert late is job and not events


def test_a_member_that_could_not_start_fails_the_gang_with_its_reason() -> None:
    job = bound_gang(2)
    failure = ("start_failed", "no such file: python9")
    job, _ = gangs.complete(job, "b", 1, (None, None), NOW, 1, failure)
    assert job.status.failed_rank == 1 and job.status.signal == "cancel"
    assert job.status.message == "no such file: python9"
    job, _ = gangs.complete(job, "a", 0, (None, None), NOW, 1, ("start_failed", "stopped"))
    assert job.status.phase == P.FAILED and job.status.reason == "rank 1 failed: start_failed"


def test_cancel_ends_the_gang_once_every_member_ended() -> None:
    job = running_gang(2)
    job, _ = transitions.cancel(job, NOW)
    assert job.status.signal == "cancel" and job.status.phase == P.RUNNING
    job, _ = transitions.stopping(job, "b", NOW, 1, 1)
    assert job.status.phase == P.CANCELLING
    job, events = gangs.complete(job, "a", 0, (None, 15), NOW, 1)
    assert job.status.phase == P.CANCELLING and job.status.failed_rank is None
    job, events = gangs.complete(job, "b", 1, (1, None), NOW, 1)
    assert job.status.phase == P.CANCELLED and "job_cancelled" in [e.event for e in events]


def test_the_checkpoint_is_complete_once_every_member_saw_the_sentinel() -> None:
    job = running_gang(2)
    job, events = transitions.request_preemption(job, NOW, "manual")
    job, events = gangs.checkpoint_complete(job, "b", 1, NOW, 1)
    preemption = job.status.preemption
    assert preemption is not None and not preemption.checkpoint_complete and not events
    job, events = gangs.checkpoint_complete(job, "a", 0, NOW, 1)
    preemption = job.status.preemption
    assert preemption is not None and preemption.checkpoint_complete
    assert [e.event for e in events] == ["checkpoint_complete"]
    again, events = gangs.checkpoint_complete(job, "a", 0, NOW, 1)
    assert again is job and not events
    job, _ = gangs.complete(job, "a", 0, (0, None), NOW, 1, None, "/ck/0/latest.pt")
    job, _ = gangs.complete(job, "b", 1, (0, None), NOW, 1, None, "/ck/1/latest.pt")
    assert job.status.phase == P.PREEMPTED
    assert [m.checkpoint_latest for m in job.status.members] == [
        "/ck/0/latest.pt",
        "/ck/1/latest.pt",
    ]


def test_progress_is_rank_0s_alone() -> None:
    job = running_gang(2)
    same, _ = transitions.progress(job, "b", {"step": 5}, NOW, 1, 1)
    assert same is job and job.status.progress is None
    moved, _ = transitions.progress(job, "a", {"step": 5}, NOW, 1, 0)
    assert moved.status.progress is not None and moved.status.progress.step == 5


def test_a_retry_queues_the_whole_gang_again_unbound() -> None:
    job = running_gang(2, RetryPolicy(limit=1, backoff_s=5))
    job, _ = gangs.complete(job, "a", 0, (1, None), NOW, 1)
    job, events = gangs.complete(job, "b", 1, (None, 15), NOW, 1)
    status = job.status
    assert status.phase == P.PENDING and status.retries == 1
    assert status.members == [] and status.master_port is None and status.failed_rank is None
    assert status.worker is None and status.retry_at == NOW + timedelta(seconds=5)
    assert [(a.attempt, a.worker, a.exit_code) for a in status.attempts] == [(1, "a", 1)]
    assert [e.event for e in events] == ["job_retrying"]


def test_a_retried_gang_resumes_each_rank_from_its_own_checkpoint() -> None:
    job = running_gang(2, RetryPolicy(limit=2, backoff_s=0))
    job, _ = gangs.complete(job, "a", 0, (1, None), NOW, 1, checkpoint_latest="/ck/0/a.pt")
    job, _ = gangs.complete(job, "b", 1, (None, 15), NOW, 1, checkpoint_latest="/ck/1/b.pt")
    status = job.status
    assert (status.phase, status.resume_from) == (P.PENDING, "/ck/0/a.pt")
    assert status.resume_from_ranks == {"0": "/ck/0/a.pt", "1": "/ck/1/b.pt"}
    # Bound again, each member's agent gives its workload its own rank's checkpoint.
    placements = [(w, f"127.0.0.{i + 2}", []) for i, w in enumerate(WORKERS[:2])]
    job, _ = bind_gang(job, placements, NOW)
    view = JobView(job.model_dump(mode="json", exclude_defaults=True))
    for worker, path in (("a", "/ck/0/a.pt"), ("b", "/ck/1/b.pt")):
        settings = WorkerSettings(
            name=worker, slots=1, gpus=[], checkpoint_root=Path("/ck"), default_grace_s=5,
            state_dir=Path("/tmp/state"), base_env={},
        )  # fmt: skip
        assert workload_env(view, settings, Path("/ck/7"))["RESUME_FROM"] == path, worker


def test_a_retried_gangs_next_failure_fails_it_again() -> None:
    # The first failing member drives the job to Failed (desired); the retry must want it
    # Running again, or the next run's failing member is not taken as one.
    job = running_gang(2, RetryPolicy(limit=2, backoff_s=0))
    job, _ = gangs.complete(job, "a", 0, (1, None), NOW, 1, checkpoint_latest="/ck/0/a.pt")
    job, _ = gangs.complete(job, "b", 1, (None, 15), NOW, 1, checkpoint_latest="/ck/1/b.pt")
    assert (job.status.phase, job.status.desired_phase) == (P.PENDING, P.RUNNING)
    placements = [(w, f"127.0.0.{i + 2}", []) for i, w in enumerate(WORKERS[:2])]
    job, _ = bind_gang(job, placements, NOW)
    for rank in range(2):
        job, _ = gangs.start(job, WORKERS[rank], rank, NOW, 2, (29500 if rank == 0 else None, ""))
    job, _ = gangs.complete(job, "b", 1, (3, None), NOW, 2)
    assert (job.status.failed_rank, job.status.signal) == (1, "cancel"), "rank 0 is stopped"
    job, events = gangs.complete(job, "a", 0, (None, 15), NOW, 2, checkpoint_latest="/ck/0/c.pt")
    assert (job.status.phase, job.status.retries) == (P.PENDING, 2)
    assert [e.event for e in events] == ["job_retrying"]
    # Rank 1 left no checkpoint this time: it keeps the one it had.
    assert job.status.resume_from_ranks == {"0": "/ck/0/c.pt", "1": "/ck/1/b.pt"}


def test_a_lost_gang_runs_again_when_a_member_reports_it_runs() -> None:
    job = running_gang(2)
    lost, events = transitions.lose(job, NOW)
    assert lost.status.phase == P.LOST
    back, events = gangs.start(lost, "b", 1, NOW, 1)
    assert back.status.phase == P.RUNNING and [e.event for e in events] == ["job_recovered"]


def test_a_job_of_one_node_takes_reports_of_rank_0_only() -> None:
    job = running_gang(2)
    single = job.model_copy(deep=True)
    single.status.members = []
    with pytest.raises(TransitionError, match="member 1 of job 7"):
        transitions.complete(single, "a", 0, None, NOW, 1, None, 1)


def test_each_worker_holds_its_own_members_gpus() -> None:
    spec = JobSpec(command=["x"], nodes=2)
    job = Job(metadata=ObjectMeta(id=8, name="g2", resource_version=1), spec=spec)
    job, _ = bind_gang(job, [("a", None, [0, 1]), ("b", None, [3])], NOW)
    assert job.status.gpus == [0, 1]  # rank 0's, mirrored
    assert (gangs.gpus_on(job, "a"), gangs.gpus_on(job, "b")) == ([0, 1], [3])
    with pytest.raises(TransitionError, match="needs 2 different workers"):
        bind_gang(job.model_copy(deep=True), [("a", None, []), ("a", None, [])], NOW)


def test_a_hang_guard_stops_every_member_and_the_gang_ends_failed_with_its_reason() -> None:
    job = running_gang(2)
    job, events = transitions.time_out(job, "MaxRuntimeExceeded", "ran past 1h", NOW)
    assert job.status.signal == "timeout" and [e.event for e in events] == ["job_timed_out"]
    job, _ = gangs.complete(job, "a", 0, (None, 15), NOW, 1)
    assert job.status.phase == P.RUNNING and job.status.failed_rank is None
    job, _ = gangs.complete(job, "b", 1, (143, None), NOW, 1)
    assert job.status.phase == P.FAILED and job.status.reason == "MaxRuntimeExceeded"


def test_a_preempted_gang_ends_preempted_once_every_member_ended() -> None:
    job = running_gang(2)
    job, _ = transitions.request_preemption(job, NOW, "sweeper")
    job, _ = transitions.stopping(job, "a", NOW, 1, 0)
    assert job.status.phase == P.PREEMPTING
    job, _ = gangs.complete(job, "a", 0, (0, None), NOW, 1)
    job, _ = gangs.complete(job, "b", 1, (0, None), NOW, 1)
    assert job.status.phase == P.PREEMPTED
    assert [m.phase for m in job.status.members] == [P.PREEMPTED, P.PREEMPTED]
