"""What `jobd worker` and `jobd dev` learn of their host at start: its name and its GPUs.

Both are checked before the agent starts, so a setting that cannot work is one clear
sentence and a non-zero exit, never a worker that retries for ever or hands out a GPU
the host does not have:

- the name (`--name`, default the hostname) is lower-cased, as Kubernetes does node
  names; what is still no name after that (empty, over 63 characters, characters other
  than letters, digits, `.`, `_`, `-`) is refused;
- `--gpus` takes indices (`0,1`) or a declared inventory (`0:24GiB,1:80GiB`, memory per
  GPU; placement does not use the memory yet); a negative index is refused, and where
  `nvidia-smi` answers, so is an index it does not list. When `nvidia-smi` is there but
  fails or hangs, a warning says so instead of running silently with no GPUs.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from typing import IO, Any

import click

__all__ = ["Detected", "StartupError", "check_gpus", "detect_gpus", "parse_gpus", "worker_name"]

_NVIDIA_SMI_TIMEOUT_S = 10
_GPU_ENTRY = re.compile(r"(-?\d+)(?::(\d+(?:\.\d+)?)\s*([KMGT]i?B?)?)?", re.IGNORECASE)


class StartupError(click.ClickException):
    """A setting the worker cannot start with: one sentence on stderr, exit 1."""

    def show(self, file: IO[Any] | None = None) -> None:
        click.echo(f"jobd: error: {self.message}", err=True)


def worker_name(raw: str) -> str:
    """The worker's name: `raw` lower-cased (CONTRACT §2); StartupError when unusable."""
    from jobd.api.models import normalise_worker_name

    try:
        return normalise_worker_name(raw)
    except ValueError as exc:
        raise StartupError(f"{exc}; set another with --name or JOBD_WORKER_NAME") from None


def parse_gpus(value: str | None) -> list[int] | None:
    """The GPU indices `--gpus` declares; None: not given (detect them); [] for none."""
    if value is None:
        return None
    if value.strip().lower() in ("", "none"):
        return []
    indices: list[int] = []
    for entry in (e.strip() for e in value.split(",")):
        match = _GPU_ENTRY.fullmatch(entry)
        if not match:
            raise StartupError(
                f"--gpus {value!r}: {entry!r} is neither a GPU index (0,1) "
                "nor an index with its memory (0:24GiB)"
            )
        index = int(match.group(1))
        if index < 0:
            raise StartupError(f"--gpus {value!r}: GPU index {index} is negative")
        if index in indices:
            raise StartupError(f"--gpus {value!r}: GPU {index} is listed twice")
        indices.append(index)
    return sorted(indices)


@dataclass(frozen=True)
class Detected:
    indices: list[int] | None  # None: nothing answered (no nvidia-smi, or it failed)
    problem: str | None = None  # why nvidia-smi, though present, gave no answer


def detect_gpus(timeout_s: float = _NVIDIA_SMI_TIMEOUT_S) -> Detected:
    """The GPUs `nvidia-smi` lists; no nvidia-smi on PATH: none known, and no problem."""
    if shutil.which("nvidia-smi") is None:
        return Detected(None)
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=True,
        ).stdout
    except subprocess.TimeoutExpired:
        return Detected(None, f"nvidia-smi did not answer within {timeout_s:g} s")
    except subprocess.CalledProcessError as exc:
        said = (exc.stderr or exc.stdout or "").strip().splitlines()
        return Detected(None, f"nvidia-smi exited {exc.returncode}: {said[0] if said else ''}")
    except OSError as exc:
        return Detected(None, f"nvidia-smi could not run: {exc}")
    words = out.split()
    if not all(w.isdigit() for w in words):
        return Detected(None, f"nvidia-smi answered what is not a GPU index: {out.strip()!r}")
    return Detected(sorted(int(w) for w in words))


def check_gpus(declared: list[int] | None, detected: Detected) -> tuple[list[int], str | None]:
    """The GPUs to hand out, and a warning to log; StartupError for an index not there."""
    found = detected.indices
    if declared is None:
        if detected.problem:
            return [], f"GPU detection failed ({detected.problem}); running with no GPUs"
        return found or [], None
    if found is not None:
        missing = [g for g in declared if g not in found]
        if missing:
            listed = ",".join(map(str, found)) or "none"
            absent = ",".join(map(str, missing))
            raise StartupError(
                f"--gpus: GPU {absent} is not on this host (nvidia-smi lists {listed})"
            )
    if detected.problem:
        return declared, f"cannot check --gpus against nvidia-smi ({detected.problem})"
    return declared, None
