"""A worker's phase moves only as controllers/worker_phases.py's table says, and every
verb says what it does from every phase; the job writes beside the phase (checkpoint
paths, a released nomination) are transition functions too."""

from __future__ import annotations

import itertools

import pytest

from jobd.api.models import ObjectMeta, Phase, Worker, WorkerPhase
from jobd.controllers import transitions
from jobd.controllers.worker_phases import TABLE, WorkerVerb, move
from tests.unit.conftest import NOW, job_in


def _worker(phase: WorkerPhase) -> Worker:
    worker = Worker(metadata=ObjectMeta(name="box"))
    worker.status.phase = phase
    return worker


def test_every_verb_says_what_it_does_from_every_phase() -> None:
    assert set(TABLE) == set(WorkerVerb)
    assert all(set(moves) == set(WorkerPhase) for moves in TABLE.values())


@pytest.mark.parametrize(("verb", "phase"), list(itertools.product(WorkerVerb, WorkerPhase)))
def test_a_move_lands_where_the_table_says_and_tells_a_change(
    verb: WorkerVerb, phase: WorkerPhase
) -> None:
    worker = _worker(phase)
    changed = move(worker, verb)
    assert worker.status.phase == TABLE[verb][phase]
    assert changed == (TABLE[verb][phase] != phase)


def test_a_lease_that_runs_out_loses_the_worker_and_a_word_brings_it_back() -> None:
    worker = _worker(WorkerPhase.READY)
    assert move(worker, WorkerVerb.EXPIRE) and worker.status.phase == WorkerPhase.LOST
    assert not move(worker, WorkerVerb.EXPIRE)
    assert move(worker, WorkerVerb.RENEW) and worker.status.phase == WorkerPhase.READY


def test_the_phase_is_written_and_read_as_the_api_has_always_said_it() -> None:
    worker = _worker(WorkerPhase.LOST)
    assert worker.model_dump(mode="json")["status"]["phase"] == "Lost"
    assert Worker.model_validate_json(worker.model_dump_json()).status.phase == "Lost"


# The job writes that sat beside the routes and loops, now transition functions.


def test_a_started_report_records_where_checkpoints_go_once() -> None:
    job = job_in(Phase.RUNNING)
    moved, events = transitions.record_checkpoint_dir(job, "/ckpt/7")
    assert moved is not job and moved.status.checkpoint_dir == "/ckpt/7" and events == []
    assert job.status.checkpoint_dir is None  # the caller's copy is untouched
    assert transitions.record_checkpoint_dir(moved, "/ckpt/7")[0] is moved
    assert transitions.record_checkpoint_dir(moved, None)[0] is moved


def test_what_a_report_records_and_its_move_leave_the_reported_job_as_it_was() -> None:
    """The recorded fields are a shallow copy (the move's deep copy follows): nothing the
    move then changes, a condition appended or the phase, reaches the job reported on."""
    job = job_in(Phase.SCHEDULED, started_at=None, attempt=1)
    before = job.model_dump_json()
    recorded, _ = transitions.record_checkpoint_dir(job, "/ckpt/7")
    recorded, _ = transitions.record_cpuset(recorded, [0, 1])
    started, _ = transitions.start(recorded, "w", NOW, attempt=1)
    latest, _ = transitions.record_checkpoint_latest(started, "/ckpt/7/step-9")
    ended, _ = transitions.complete(latest, "w", 0, None, NOW, attempt=1)
    assert ended.status.phase == Phase.SUCCEEDED and ended.status.cpuset == [0, 1]
    assert ended.status.checkpoint_latest == "/ckpt/7/step-9"
    assert job.model_dump_json() == before
    assert recorded.status.phase == Phase.SCHEDULED and not recorded.status.conditions
    assert started.status.phase == Phase.RUNNING and latest.status.phase == Phase.RUNNING


def test_a_completion_records_the_newest_checkpoint_unless_the_job_has_ended() -> None:
    moved, _ = transitions.record_checkpoint_latest(job_in(Phase.RUNNING), "/ckpt/7/step-9")
    assert moved.status.checkpoint_latest == "/ckpt/7/step-9"
    ended = job_in(Phase.CANCELLED)
    assert transitions.record_checkpoint_latest(ended, "/ckpt/7/step-9")[0] is ended


def test_releasing_a_nomination_frees_the_queued_job_and_nothing_else() -> None:
    job = job_in(Phase.PENDING, nominated_worker="w2")
    released, events = transitions.release_nomination(job)
    assert released.status.nominated_worker is None and events == []
    assert job.status.nominated_worker == "w2"
    assert released.status.phase == Phase.PENDING
    assert transitions.release_nomination(released)[0] is released
