"""The agent's durable record of one job attempt, kept beside the shim's files.

`<state root>/jobs/<job id>-<attempt>/agent.json` holds what a restarted agent needs to take
the job back where the last one left it: which job and attempt, which shim (pid and start
time, so a reused pid is not mistaken for it), the boot it ran in, the attempt's phase, how
far each output file was shipped and where the broker's log stands, when a stop began (the
sentinel is only looked for in stdout written after it), and what the broker has
acknowledged. The shim's own files (supervisor.json, status.json) say the rest, and are
enough on their own when this record is lost.

The phase is saved by name; `complete_reported` and `drained` are written beside it as
the record before phases had them, so a record of either form is read alike (an agent
upgraded while its jobs run takes them back, and so does one downgraded).
"""

from __future__ import annotations

import functools
import re
from dataclasses import asdict, dataclass, field, fields
from enum import StrEnum
from pathlib import Path
from typing import Any

from jobd.worker.shim.protocol import RECORD_FILE, SPEC_FILE
from jobd.worker.shim.statedir import read_json, write_json_atomic

__all__ = [
    "RECORD_NAME",
    "AttemptPhase",
    "JobRecord",
    "boot_id",
    "job_dir",
    "made_this_boot",
    "parse_job_dir",
]

RECORD_NAME = "agent.json"
_DIR_NAME = re.compile(r"^(\d+)-(\d+)$")


class AttemptPhase(StrEnum):
    """Where one job attempt on this worker is in its life; it only moves forward."""

    PREPARING = "preparing"  # prestart: environment, checkpoint directory, checks
    STARTING = "starting"  # its shim is being launched
    RUNNING = "running"  # the workload runs under its shim
    STOPPING = "stopping"  # a stop went to the shim: SIGTERM sent, the grace runs
    EXITED = "exited"  # the workload's end is known (or it never started)
    REPORTED = "reported"  # the broker acknowledged `complete`
    DONE = "done"  # every byte of output shipped after the end

    def reached(self, other: AttemptPhase) -> bool:
        """Whether this phase is other or comes after it."""
        return _ORDER[self] >= _ORDER[other]


_ORDER = {phase: rank for rank, phase in enumerate(AttemptPhase)}


def job_dir(jobs_root: Path, job_id: int, attempt: int) -> Path:
    return jobs_root / f"{job_id}-{attempt}"


def parse_job_dir(path: Path) -> tuple[int, int] | None:
    """(job id, attempt) a state directory is named for, or None for a stranger."""
    match = _DIR_NAME.match(path.name)
    return None if match is None else (int(match[1]), int(match[2]))


@functools.cache
def boot_id() -> str:
    """This boot of the host: a shim recorded in another boot cannot be alive."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def made_this_boot(path: Path) -> bool:
    """Whether path was made since this host last booted (its state can be this boot's)."""
    try:
        lines = Path("/proc/stat").read_text().splitlines()
        btime = next(int(line.split()[1]) for line in lines if line.startswith("btime "))
        return path.stat().st_mtime >= btime
    except (OSError, StopIteration, ValueError):
        return True


@dataclass
class JobRecord:
    job_id: int
    attempt: int
    boot_id: str = ""
    # A record is only ever found on disk once its shim was launched.
    phase: AttemptPhase = AttemptPhase.RUNNING
    supervisor_pid: int | None = None
    supervisor_start_time: int | None = None
    # Output: bytes of each file taken (shipped or dropped) and the broker log's size.
    stdout_offset: int = 0
    stderr_offset: int = 0
    log_offset: int = 0
    dropped: int = 0
    holes: dict[str, list[int]] = field(default_factory=dict)  # per file: [start, end) punched
    # A stop: its reason, and stdout's size when it was asked for (the sentinel's start).
    stop_reason: str | None = None
    sentinel_from: int | None = None
    # What the broker acknowledged besides `complete` (which the phase says).
    started_reported: bool = False
    checkpoint_reported: bool = False
    # The member this worker runs of a multi-host job (None: a job of one node).
    rank: int | None = None

    @property
    def complete_reported(self) -> bool:
        return self.phase.reached(AttemptPhase.REPORTED)

    @property
    def drained(self) -> bool:
        """Over, reported, and every byte of its output shipped."""
        return self.phase.reached(AttemptPhase.DONE)

    def advance(self, phase: AttemptPhase) -> bool:
        """Move to phase if it is later than the present one; whether it moved."""
        if phase != self.phase and phase.reached(self.phase):
            self.phase = phase
            return True
        return False

    @classmethod
    def load(cls, state_dir: Path) -> JobRecord | None:
        """The record, or one rebuilt from the shim's files (or the directory's name) when
        it is lost."""
        data = read_json(state_dir / RECORD_NAME)
        if data is not None:
            try:
                return cls.from_json(data)
            except (TypeError, ValueError):
                pass  # damaged: rebuild it below
        named = parse_job_dir(state_dir)
        spec = read_json(state_dir / RECORD_FILE) or read_json(state_dir / SPEC_FILE) or {}
        job_id, attempt = spec.get("job_id"), spec.get("attempt")
        if isinstance(job_id, int) and isinstance(attempt, int):
            return cls(job_id, attempt, rank=_rank_launched(state_dir))
        return None if named is None else cls(*named)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> JobRecord:
        known = {f.name for f in fields(cls)} - {"phase"}
        record = cls(**{k: v for k, v in data.items() if k in known})
        record.phase = _phase_of(data)
        return record

    def save(self, state_dir: Path) -> None:
        write_json_atomic(state_dir / RECORD_NAME, self.to_json())

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["phase"] = self.phase.value
        data.update(complete_reported=self.complete_reported, drained=self.drained)
        return data


def _rank_launched(state_dir: Path) -> int | None:
    """The rank a gang's member was launched as (its JOBD_NODE_RANK), from its launch spec."""
    env = (read_json(state_dir / SPEC_FILE) or {}).get("env")
    rank = env.get("JOBD_NODE_RANK") if isinstance(env, dict) else None
    return int(rank) if isinstance(rank, str) and rank.isdigit() else None


def _phase_of(data: dict[str, Any]) -> AttemptPhase:
    """The saved phase; for a record of before phases, the one its flags say."""
    if "phase" in data:
        return AttemptPhase(data["phase"])
    if data.get("drained"):
        return AttemptPhase.DONE
    if data.get("complete_reported"):
        return AttemptPhase.REPORTED
    return AttemptPhase.RUNNING if data.get("stop_reason") is None else AttemptPhase.STOPPING
