"""What `jobd worker` and `jobd dev` learn of their host at start: its name and its GPUs.

Both are checked before the agent starts, so a setting that cannot work is one clear
sentence and a non-zero exit, never a worker that retries for ever or hands out a GPU
the host does not have:

- the name (`--name`, default the hostname) is lower-cased, as Kubernetes does node
  names; what is still no name after that (empty, over 63 characters, characters other
  than letters, digits, `.`, `_`, `-`) is refused;
- `--gpus` takes indices (`0,1`) or a declared inventory (`0:24GiB,1:80GiB`, memory per
  GPU); a negative index or a bad size is refused, and where NVML or `nvidia-smi`
  answers, so is an index it does not list. When `nvidia-smi` is there but fails or
  hangs, a warning says so instead of running silently with no GPUs.

Each GPU's memory: declared (`0:24GiB`) > NVML (`jobd[nvml]`) > `nvidia-smi` > unknown
(worker/gpus.py reads the two).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from typing import IO, Any

import click

from jobd.api.sizes import parse_size

__all__ = [
    "Detected",
    "Gpus",
    "StartupError",
    "check_gpus",
    "detect_gpus",
    "parse_gpus",
    "worker_name",
]

_NVIDIA_SMI_TIMEOUT_S = 10
_NVIDIA_SMI_QUERY = ["--query-gpu=index,memory.total", "--format=csv,noheader,nounits"]
_GPU_ENTRY = re.compile(r"(-?\d+)(?::(.+))?")
# The broker's bound (api.models MAX_GPU_INDEX; not imported here, to keep pydantic out
# of `jobd --help`): refused at start, not at registration.
_MAX_GPU_INDEX = 1023
Gpus = dict[int, int | None]  # GPU index -> its memory in bytes; None: not known


class StartupError(click.ClickException):
    """A setting the worker cannot start with: one sentence on stderr, exit 1."""

    def show(self, file: IO[Any] | None = None) -> None:
        click.echo(f"jobd: error: {self.message}", err=True)


def worker_name(raw: str) -> str:
    """The worker's name: `raw` lower-cased (CONTRACT §2); StartupError when unusable."""
    from jobd.api.vocabulary import normalise_worker_name

    try:
        return normalise_worker_name(raw)
    except ValueError as exc:
        raise StartupError(f"{exc}; set another with --name or JOBD_WORKER_NAME") from None


def parse_gpus(value: str | None) -> Gpus | None:
    """The GPUs `--gpus` declares, with memory where given; None: not given (detect
    them); {} for none."""
    if value is None:
        return None
    if value.strip().lower() in ("", "none"):
        return {}
    gpus: Gpus = {}
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
        if index > _MAX_GPU_INDEX:
            raise StartupError(f"--gpus {value!r}: GPU index {index} is past {_MAX_GPU_INDEX}")
        if index in gpus:
            raise StartupError(f"--gpus {value!r}: GPU {index} is listed twice")
        try:
            gpus[index] = None if match.group(2) is None else parse_size(match.group(2))
        except ValueError as exc:
            raise StartupError(f"--gpus {value!r}: GPU {index}: {exc}") from None
    return dict(sorted(gpus.items()))


@dataclass(frozen=True)
class Detected:
    gpus: Gpus | None  # None: nothing answered (no NVML nor nvidia-smi, or it failed)
    problem: str | None = None  # why nvidia-smi, though present, gave no answer


def detect_gpus(timeout_s: float = _NVIDIA_SMI_TIMEOUT_S) -> Detected:
    """The host's GPUs and their memory: from NVML where `nvidia-ml-py` is installed,
    else from `nvidia-smi`; neither there: none known, and no problem."""
    from jobd.worker.gpus import load_nvml, nvml_gpus, smi_gpus

    nvml = load_nvml()
    if nvml is not None:
        return Detected(dict(nvml_gpus(nvml)))
    if shutil.which("nvidia-smi") is None:
        return Detected(None)
    try:
        out = subprocess.run(
            ["nvidia-smi", *_NVIDIA_SMI_QUERY],
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
    gpus = smi_gpus(out)
    if gpus is None:
        return Detected(None, f"nvidia-smi answered what is not a GPU list: {out.strip()!r}")
    return Detected(gpus)


def check_gpus(declared: Gpus | None, detected: Detected) -> tuple[Gpus, str | None]:
    """The GPUs to hand out with their memory (declared, else detected), and a warning
    to log; StartupError for an index not there."""
    found = detected.gpus
    if declared is None:
        if detected.problem:
            return {}, f"GPU detection failed ({detected.problem}); running with no GPUs"
        return found or {}, None
    if found is not None:
        missing = [g for g in declared if g not in found]
        if missing:
            listed = ",".join(map(str, found)) or "none"
            absent = ",".join(map(str, missing))
            raise StartupError(f"--gpus: GPU {absent} is not on this host (the host has {listed})")
        declared = {g: m if m is not None else found[g] for g, m in declared.items()}
    if detected.problem:
        return declared, f"cannot check --gpus against nvidia-smi ({detected.problem})"
    return declared, None
