"""The shim's messages are declared once and read in every form jobd ever wrote them.

An agent upgraded while its jobs run must take them back: status.json, supervisor.json and
the agent's own agent.json written before the protocol had a version (or the record a
phase) are read alike, and what is written now still carries what older readers look for.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jobd.worker.jobrecord import RECORD_NAME, AttemptPhase, JobRecord
from jobd.worker.shim.procfs import ProcessIdentity
from jobd.worker.shim.protocol import (
    PROTOCOL_VERSION,
    Ended,
    ExitStatus,
    LaunchRequest,
    LaunchSpec,
    ShimRecord,
    Started,
    StopRecord,
    StopRequest,
    decode_reply,
)

SPEC = LaunchSpec(["true"], "/", {"PATH": "/bin"}, 5.0, 42, 1)
STOP = StopRecord("preempt", 5.0, "t0", "t1", "t2", None)


def test_each_message_round_trips_through_its_dict() -> None:
    assert LaunchSpec.from_dict(SPEC.to_dict()) == SPEC
    assert StopRequest.from_dict(StopRequest("preempt", 2.0, "t").to_dict()).grace_s == 2.0
    assert StopRecord.from_dict(STOP.to_dict()) == STOP
    status = ExitStatus(None, 9, "SIGKILL", "a", "b", 7, STOP, None, 42, 1)
    assert ExitStatus.from_dict(json.loads(json.dumps(status.to_dict()))) == status
    record = ShimRecord(ProcessIdentity(10, 11), ProcessIdentity(12, 13), 42, 1, 5.0, "/d", "a")
    assert ShimRecord.from_dict(record.to_dict()) == record


def test_every_document_carries_the_protocol_version() -> None:
    assert SPEC.to_dict()["version"] == PROTOCOL_VERSION
    assert ExitStatus.unrecorded().to_dict()["version"] == PROTOCOL_VERSION
    request = json.loads(LaunchRequest(3, "/d", SPEC).encode())
    assert request["version"] == PROTOCOL_VERSION and request["spec"]["argv"] == ["true"]


def test_a_status_json_of_before_the_version_is_read() -> None:
    old = {
        "exit_code": None,
        "signal": 15,
        "signal_name": "SIGTERM",
        "started_at": "a",
        "finished_at": "b",
        "workload_pid": 7,
        "job_id": 42,
        "attempt": 1,
        "error": None,
        "stop": {**STOP.to_dict(), "sigkill_at": None},
    }
    status = ExitStatus.from_dict(old)
    assert (status.signal, status.stop, status.lost) == (15, STOP, False)


def test_a_supervisor_json_of_before_the_version_is_read() -> None:
    old = {"supervisor_pid": 10, "supervisor_start_time": 11, "workload_pid": 12}
    old.update(workload_start_time=13, pgid=12, job_id=42, attempt=1, grace_s=5)
    record = ShimRecord.from_dict(old)
    assert record is not None
    assert (record.shim, record.workload) == (ProcessIdentity(10, 11), ProcessIdentity(12, 13))
    assert ShimRecord.from_dict({"workload_pid": 12}) is None  # no shim named: none


def test_a_launch_spec_no_shim_can_run_is_refused_with_its_reason() -> None:
    with pytest.raises(ValueError, match="argv"):
        LaunchSpec.from_dict({**SPEC.to_dict(), "argv": []})
    with pytest.raises(ValueError, match="grace_s"):
        LaunchSpec.from_dict({**SPEC.to_dict(), "grace_s": -1})


def test_the_pool_replies_decode_to_what_was_encoded() -> None:
    assert decode_reply(Started(3, 100, 200).encode().strip()) == Started(3, 100, 200)
    assert decode_reply(Ended(3).encode().strip()) == Ended(3)


@pytest.mark.parametrize(
    ("flags", "phase"),
    [
        ({}, AttemptPhase.RUNNING),
        ({"stop_reason": "preempt", "sentinel_from": 10}, AttemptPhase.STOPPING),
        ({"complete_reported": True}, AttemptPhase.REPORTED),
        ({"complete_reported": True, "drained": True}, AttemptPhase.DONE),
    ],
)
def test_an_agent_json_of_before_phases_is_adopted_in_the_phase_its_flags_say(
    tmp_path: Path, flags: dict[str, object], phase: AttemptPhase
) -> None:
    old = {"job_id": 42, "attempt": 1, "boot_id": "b", "supervisor_pid": 10}
    old.update(supervisor_start_time=11, stdout_offset=5, started_reported=True)
    (tmp_path / RECORD_NAME).write_text(json.dumps({**old, **flags}))
    record = JobRecord.load(tmp_path)
    assert record is not None
    assert (record.job_id, record.stdout_offset, record.phase) == (42, 5, phase)


def test_an_agent_json_still_says_what_older_agents_read(tmp_path: Path) -> None:
    record = JobRecord(42, 1, phase=AttemptPhase.REPORTED)
    record.save(tmp_path)
    saved = json.loads((tmp_path / RECORD_NAME).read_text())
    assert saved["phase"] == "reported"
    assert (saved["complete_reported"], saved["drained"]) == (True, False)
    loaded = JobRecord.load(tmp_path)
    assert loaded is not None and loaded.phase is AttemptPhase.REPORTED


def test_a_phase_never_moves_back() -> None:
    record = JobRecord(42, 1, phase=AttemptPhase.STOPPING)
    assert not record.advance(AttemptPhase.RUNNING)
    assert record.advance(AttemptPhase.EXITED) and record.phase is AttemptPhase.EXITED
