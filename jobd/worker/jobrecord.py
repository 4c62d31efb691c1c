"""The agent's durable record of one job attempt, kept beside the supervisor's files.

`<state root>/jobs/<job id>-<attempt>/agent.json` holds what a restarted agent needs to take
the job back where the last one left it: which job and attempt, which supervisor (pid and
start time, so a reused pid is not mistaken for it), the boot it ran in, how far each output
file was shipped and where the broker's log stands, when a stop began (the sentinel is only
looked for in stdout written after it), and what the broker has acknowledged. The
supervisor's own files (supervisor.json, status.json) say the rest, and are
enough on their own when this record is lost.
"""

from __future__ import annotations

import functools
import re
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from jobd.worker.supervisor import RECORD_FILE, SPEC_FILE, read_json, write_json_atomic

__all__ = ["RECORD_NAME", "JobRecord", "boot_id", "job_dir", "made_this_boot", "parse_job_dir"]

RECORD_NAME = "agent.json"
_DIR_NAME = re.compile(r"^(\d+)-(\d+)$")


def job_dir(jobs_root: Path, job_id: int, attempt: int) -> Path:
    return jobs_root / f"{job_id}-{attempt}"


def parse_job_dir(path: Path) -> tuple[int, int] | None:
    """(job id, attempt) a state directory is named for, or None for a stranger."""
    match = _DIR_NAME.match(path.name)
    return None if match is None else (int(match[1]), int(match[2]))


@functools.cache
def boot_id() -> str:
    """This boot of the host: a supervisor recorded in another boot cannot be alive."""
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
    # What the broker acknowledged.
    started_reported: bool = False
    checkpoint_reported: bool = False
    complete_reported: bool = False
    drained: bool = False  # every byte of output shipped after the end

    @classmethod
    def load(cls, state_dir: Path) -> JobRecord | None:
        """The record, or one rebuilt from the supervisor's files (or the directory's name)
        when it is lost."""
        data = read_json(state_dir / RECORD_NAME)
        if data is not None:
            known = {f.name for f in fields(cls)}
            try:
                return cls(**{k: v for k, v in data.items() if k in known})
            except TypeError:
                pass  # damaged: rebuild it below
        named = parse_job_dir(state_dir)
        spec = read_json(state_dir / RECORD_FILE) or read_json(state_dir / SPEC_FILE) or {}
        job_id, attempt = spec.get("job_id"), spec.get("attempt")
        if isinstance(job_id, int) and isinstance(attempt, int):
            return cls(job_id, attempt)
        return None if named is None else cls(*named)

    def save(self, state_dir: Path) -> None:
        write_json_atomic(state_dir / RECORD_NAME, self.to_json())

    def to_json(self) -> dict[str, Any]:
        return asdict(self)
